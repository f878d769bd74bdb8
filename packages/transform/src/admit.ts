// Transform text is untrusted input wherever a service uses it (issue 28, SPEC "Identity and
// roles"). `genfill.submit_release` stores what the caller hands it — a CLI that ran the checks,
// or psql that did not — and the services then paste that text into statements they run with
// the fleet's rights. So no service trusts the checks of another process: before each use, the
// text is admitted again here, with the context its release declared.
//
// What admission is: the static check (exactly one plain SELECT, row-local, deterministic, no
// denied built-in, no parameter) and the database probe (planned for real in a rolled-back
// savepoint: no VOLATILE function, no function outside pg_catalog the owner did not put in
// genfill.transform_functions, no relation beyond the declared source and dependencies, the key
// and time columns in the output). A refusal is a TransformRefusedError listing every problem;
// nothing of the transform ran.
//
// Why a cache: the probe costs a savepoint and a dozen catalog queries, and a build calls this
// per partition, a projector per batch. A POSITIVE verdict is kept per process for at most
// 60 s, keyed by sha256 of the database, the exact text and the context — a tampered text or
// another context is a new key and is probed afresh. A refusal is never cached (the next use
// probes again). The price: an allow-list row the owner deletes, or a dependency dropped,
// stops a transform up to 60 s later; the submitter's privileges are re-checked by the
// database itself (genfill.transform_admissible) when a release is planned.
//
// The context of a stored digest (`loadAdmittedTransform`): the release that uses it — its
// spec's source table, key, time and dependencies — or, for a transform-map entry with no
// release (an adopted dataset), the dataset's source, key, time and its recorded
// genfill.dataset_dependencies, with reads of other relations tolerated as `dataset adopt`
// tolerates them (an install step run by the table's owner; see tolerateUndeclared) — every
// other rule holds for it. This module, not @genfill/registry, is the one loader every
// service calls: the registry may not depend on the checks (layering), and one loader means no
// site reads genfill.transforms on its own.
import { createHash } from 'node:crypto';
import { type Problem, TransformRefusedError } from '@genfill/contracts';
import type { ClientBase } from 'pg';
import { probeTransform } from './probe.ts';
import { checkTransformStatic } from './static.ts';
import { stripTrailingSemicolons } from './wrap.ts';

export interface TransformContext {
  /** Schema-qualified source table, as the release spells it. */
  sourceTable: string;
  key: string[];
  time: string;
  /** Schema-qualified relations the transform may read besides source. */
  dependencies: string[];
  /** The release whose transform this is (for messages), or null for an adopted dataset's. */
  release?: string | null;
  /**
   * Reads of relations beyond the declared ones are tolerated: only for an adopted dataset's
   * transform, which `dataset adopt` (an install step of a genfill_service login that owns the
   * table, not a person's verb) accepted with the old pipeline's reference tables as they were.
   */
  tolerateUndeclared?: boolean;
}

export interface AdmittedTransform {
  digest: string;
  /** The transform's body, trailing statement terminators removed: what a site nests in parentheses. */
  sql: string;
  context: TransformContext;
}

/** How long a positive verdict is reused in this process. */
export const ADMISSION_TTL_MS = 60_000;
const MAX_CACHED = 1000;
const admitted = new Map<string, number>();

function databaseOf(client: ClientBase): string {
  const p = (client as unknown as { connectionParameters?: { host?: string; port?: number; database?: string } }).connectionParameters;
  return p ? `${p.host ?? ''}:${p.port ?? ''}/${p.database ?? ''}` : '';
}

function cacheKey(client: ClientBase, sql: string, ctx: TransformContext): string {
  const context = JSON.stringify([ctx.sourceTable, ctx.key, ctx.time, [...ctx.dependencies].sort(), ctx.tolerateUndeclared === true]);
  return createHash('sha256').update(databaseOf(client)).update('\0').update(sql).update('\0').update(context).digest('hex');
}

function remember(key: string, now: number): void {
  if (admitted.size >= MAX_CACHED) {
    for (const [k, until] of admitted) if (until <= now) admitted.delete(k);
    if (admitted.size >= MAX_CACHED) admitted.delete(admitted.keys().next().value!);
  }
  admitted.set(key, now + ADMISSION_TTL_MS);
}

/** Forget every cached verdict (tests that change the allow-list or grants in one process). */
export function forgetAdmissions(): void {
  admitted.clear();
}

/**
 * Admits transform text for one use: throws TransformRefusedError with every problem, or returns.
 * Works inside the caller's transaction (a savepoint) or outside one.
 */
export async function admitTransform(client: ClientBase, t: TransformContext & { sql: string; digest?: string | null }): Promise<void> {
  const key = cacheKey(client, t.sql, t);
  const now = Date.now();
  const until = admitted.get(key);
  if (until !== undefined && until > now) return;
  if (until !== undefined) admitted.delete(key);

  // The probe creates a temporary view, which a READ ONLY transaction (the reconciler's
  // exported snapshot) may not: such a caller admits the text on another connection first
  // (admitOnConnection) and finds the verdict cached here. A miss means the text or its context
  // changed since — refused, never run unchecked.
  const { rows: ro } = await client.query<{ ro: boolean }>(`SELECT current_setting('transaction_read_only') = 'on' AS ro`);
  if (ro[0]?.ro) {
    const message = 'was not admitted before this read-only transaction began (its text or context changed since): run again';
    throw new TransformRefusedError([{ path: 'transform', message }], t.digest ?? null, t.release ?? null);
  }
  const problems: Problem[] = [...(await checkTransformStatic(t.sql)).problems];
  // The probe runs the text; a text the parser already refused never reaches the database.
  if (problems.length === 0) {
    const probe = await probeTransform(client, { sql: t.sql, sourceTable: t.sourceTable, key: t.key, time: t.time, dependencies: t.dependencies });
    const tolerated = new Set(t.tolerateUndeclared ? probe.undeclared : []);
    problems.push(...probe.problems.filter((p) => !tolerated.has(p)));
  }
  if (problems.length > 0) throw new TransformRefusedError(problems, t.digest ?? null, t.release ?? null);
  remember(key, now);
}

interface StoredRow {
  sql: string;
  spec: { source?: { table?: string; key?: string[]; time?: string }; dependencies?: string[] } | null;
  release_dataset: string | null;
  source_table: string | null;
  key_columns: string[] | null;
  time_column: string | null;
  dataset_dependencies: string[] | null;
}

/**
 * loadAdmittedTransform on a connection of its own, outside any transaction: for a caller about
 * to open a READ ONLY transaction in which the probe cannot run (see admitTransform).
 */
export async function admitOnConnection(
  db: { connect(): Promise<ClientBase & { release(): void }> },
  ref: { digest: string; release: string | null; dataset?: string },
): Promise<AdmittedTransform> {
  const client = await db.connect();
  try {
    return await loadAdmittedTransform(client, ref);
  } finally {
    client.release();
  }
}

/**
 * The one loader of stored transform text: reads the digest's text and its context (the
 * release's spec, or for `release: null` the dataset's adopt context), admits it, and returns
 * the body to nest. Every service calls this before each use.
 */
export async function loadAdmittedTransform(
  client: ClientBase,
  ref: { digest: string; release: string | null; dataset?: string },
): Promise<AdmittedTransform> {
  const { rows } = await client.query<StoredRow>(
    `SELECT t.sql, r.spec, r.dataset AS release_dataset, d.source_table, d.key_columns, d.time_column,
            ARRAY(SELECT dd.relation FROM genfill.dataset_dependencies dd WHERE dd.dataset = d.name ORDER BY 1) AS dataset_dependencies
       FROM genfill.transforms t
       LEFT JOIN genfill.releases r ON r.id = $2
       LEFT JOIN genfill.datasets d ON d.name = coalesce(r.dataset, $3)
      WHERE t.digest = $1`,
    [ref.digest, ref.release, ref.dataset ?? null],
  );
  const row = rows[0];
  const refuse = (message: string) => new TransformRefusedError([{ path: 'transform', message }], ref.digest, ref.release);
  if (!row) throw refuse(`transform ${ref.digest} is not in the registry`);
  let context: TransformContext;
  if (ref.release !== null) {
    const source = row.spec?.source;
    if (!row.release_dataset || !source?.table || !source.key || !source.time) {
      throw refuse(`release ${ref.release} does not exist or its spec names no source: its transform has no context to be checked in`);
    }
    context = { sourceTable: source.table, key: source.key, time: source.time, dependencies: row.spec?.dependencies ?? [], release: ref.release };
  } else {
    if (!row.source_table || !row.key_columns || !row.time_column) {
      throw refuse(`dataset ${ref.dataset ?? '?'} does not exist: an adopted transform is checked against its dataset's source`);
    }
    context = {
      sourceTable: row.source_table,
      key: row.key_columns,
      time: row.time_column,
      dependencies: row.dataset_dependencies ?? [],
      release: null,
      tolerateUndeclared: true,
    };
  }
  await admitTransform(client, { ...context, sql: row.sql, digest: ref.digest });
  return { digest: ref.digest, sql: stripTrailingSemicolons(row.sql), context };
}
