// `genfill dataset adopt`: an existing table (what the user's old pipeline built) becomes the
// first active generation, without copying, losing or changing a row, and without breaking
// readers of its name. Three short steps, each safe to resume:
//   1. move:   one transaction renames the table into genfill_data as the generation's
//              table and puts a plain view with the same columns under the old name;
//   2. shape:  add the system columns (metadata only), validate the generation CHECK and
//              build the (generation, key) unique index CONCURRENTLY — readers go on;
//   3. attach: one transaction creates the parent, ATTACHes the table (no scan: the CHECK
//              proves the bound) and repoints the view at the active generation.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { InvalidInputError, quoteIdent, quoteQualified, RefusedError, sha256, type Problem } from '@genfill/contracts';
import {
  addGeneration,
  createParent,
  DATASET_ACTIONS,
  DATA_SCHEMA,
  findDataset,
  isServiceLogin,
  generationTable,
  insertDataset,
  insertTransform,
  logDatasetAction,
  qualifiedGenerationTable,
  relationColumns,
  SYSTEM_COLUMNS,
  targetViewSql,
  withTransaction,
  type Conn,
  type Db,
} from '@genfill/registry';
import { holdLock } from '@genfill/registry';
import { installCapture } from '@genfill/capture';
import { checkTransformStatic, probeTransform } from '@genfill/transform';
import { checkSourceTable, tableColumns } from './admission.ts';

const ident = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be a plain SQL identifier');
const qualified = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$/, 'must be schema-qualified, e.g. public.orders_enriched');
export const adoptOptionsSchema = z.strictObject({
  dataset: ident,
  source: qualified,
  key: z.array(ident).min(1),
  time: ident,
  table: qualified,
  generation: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,39}$/, 'must be 1–40 characters of lower-case letters, digits, _ and -'),
  transformFile: z.string().min(1),
  /** Tables the transform reads besides the source: captured, and a change marks the dataset stale. */
  dependencies: z.array(qualified).default([]),
});
export type AdoptOptions = z.input<typeof adoptOptionsSchema>;
type AdoptParsed = z.infer<typeof adoptOptionsSchema>;

export interface AdoptResult {
  status: 'adopted' | 'already-adopted';
  dataset: string;
  generation: string;
  rows: number;
  /** The first projector frontier: the adopt snapshot, taken after capture was installed. */
  frontier: string | null;
  /** Tables whose capture this adopt installed or found in place (source, dependencies). */
  captured: string[];
}

const SAMPLE = 20;

async function relkind(conn: Conn, name: string): Promise<string | null> {
  const { rows } = await conn.query<{ k: string }>('SELECT relkind::text AS k FROM pg_class WHERE oid = to_regclass($1)', [name]);
  return rows[0]?.k ?? null;
}

/** Everything that would make adopt lose, change or hide rows, or break the table's users. */
async function preflight(conn: Conn, o: AdoptParsed, transformSql: string): Promise<void> {
  const problems: Problem[] = [];
  const src = await checkSourceTable(conn, { table: o.source, key: o.key, time: o.time }, { table: '--source', key: '--key', time: '--time' });
  problems.push(...src.problems);
  const table = await tableColumns(conn, o.table);
  if (!table) throw new InvalidInputError([{ path: '--table', message: `${o.table} does not exist` }]);
  if (table.kind !== 'r') problems.push({ path: '--table', message: `${o.table} is not a plain table (relkind ${table.kind})` });
  const names = new Set(table.columns.map((c) => c.name));
  for (const c of [...o.key, o.time]) if (!names.has(c)) problems.push({ path: '--table', message: `${o.table} has no column ${c}` });
  for (const c of SYSTEM_COLUMNS) if (names.has(c)) problems.push({ path: '--table', message: `${o.table} has a column ${c}, which genfill reserves` });
  if (generationTable(o.dataset, o.generation).length > 63) {
    problems.push({ path: '--generation', message: `${generationTable(o.dataset, o.generation)} is longer than PostgreSQL's 63 bytes: shorten the dataset or generation` });
  }
  problems.push(...(await checkTransformStatic(transformSql)).problems);
  if (problems.length > 0) throw new InvalidInputError(problems);

  const probe = await probeTransform(conn, { sql: transformSql, sourceTable: o.source, key: o.key, time: o.time, dependencies: [], target: { table: o.table } });
  // A legacy transform may read reference tables the old pipeline used; adopt records them
  // as they are, so only undeclared-table findings are tolerated here.
  const tolerated = new Set(probe.undeclared);
  const blocking = probe.problems.filter((p) => !tolerated.has(p));
  if (blocking.length > 0) throw new InvalidInputError(blocking);

  const { rows: deps } = await conn.query<{ what: string; name: string }>(
    `SELECT 'view' AS what, v.oid::regclass::text AS name
       FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class
      WHERE d.refobjid = $1::regclass AND d.classid = 'pg_rewrite'::regclass AND v.oid <> $1::regclass
     UNION SELECT 'foreign key', conname || ' on ' || conrelid::regclass::text FROM pg_constraint WHERE confrelid = $1::regclass
     UNION SELECT 'trigger', tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal
     UNION SELECT 'inheritance', inhrelid::regclass::text FROM pg_inherits WHERE inhparent = $1::regclass OR inhrelid = $1::regclass
     ORDER BY 1, 2`,
    [o.table],
  );
  if (deps.length > 0) {
    throw new RefusedError(
      `${o.table} cannot become a generation while these depend on it: ${deps.map((d) => `${d.what} ${d.name}`).join(', ')}; ` +
        'drop them (recreate views over the adopted name afterwards) and run adopt again',
    );
  }
  const keyList = o.key.map(quoteIdent).join(', ');
  const dupes = await conn.query<{ key: string; n: string }>(
    `SELECT row(${keyList})::text AS key, count(*) AS n FROM ${quoteQualified(o.table)}
      GROUP BY ${keyList} HAVING count(*) > 1 ORDER BY ${keyList} LIMIT ${SAMPLE}`,
  );
  const nulls = await conn.query<{ key: string }>(
    `SELECT row(${keyList})::text AS key FROM ${quoteQualified(o.table)}
      WHERE ${quoteIdent(o.time)} IS NULL OR ${o.key.map((k) => `${quoteIdent(k)} IS NULL`).join(' OR ')}
      ORDER BY ${keyList} LIMIT ${SAMPLE}`,
  );
  const refusals: string[] = [];
  if (dupes.rows.length > 0) {
    refusals.push(`key (${o.key.join(', ')}) is not unique in ${o.table}: ${dupes.rows.map((d) => `${d.key} ×${d.n}`).join(', ')}${dupes.rows.length === SAMPLE ? ', …' : ''}`);
  }
  if (nulls.rows.length > 0) {
    refusals.push(`rows of ${o.table} with a NULL ${o.time} or key: ${nulls.rows.map((r) => r.key).join(', ')}${nulls.rows.length === SAMPLE ? ', …' : ''}`);
  }
  if (refusals.length > 0) throw new RefusedError(`adopt refused, nothing was changed: ${refusals.join('; ')}`);
}

/** Step 1: the table moves under genfill_data; a same-shaped plain view takes its name. */
async function move(db: Db, o: AdoptParsed, transformSql: string, transformDigest: string): Promise<void> {
  const gtable = generationTable(o.dataset, o.generation);
  const [schema, name] = o.table.split('.') as [string, string];
  await withTransaction(db, async (conn) => {
    await conn.query(`SET LOCAL lock_timeout = '5s'`);
    const cols = await relationColumns(conn, o.table);
    const { rows: readers } = await conn.query<{ grantee: string }>(
      `SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee
         FROM pg_class c, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.oid = $1::regclass AND a.privilege_type = 'SELECT'`,
      [o.table],
    );
    await conn.query(`ALTER TABLE ${quoteQualified(o.table)} RENAME TO ${quoteIdent(gtable)}`);
    await conn.query(`ALTER TABLE ${quoteIdent(schema)}.${quoteIdent(gtable)} SET SCHEMA ${quoteIdent(DATA_SCHEMA)}`);
    const moved = qualifiedGenerationTable(o.dataset, o.generation);
    await conn.query(`CREATE VIEW ${quoteIdent(schema)}.${quoteIdent(name)} AS SELECT ${cols.map((c) => quoteIdent(c.name)).join(', ')} FROM ${moved}`);
    for (const r of readers) await conn.query(`GRANT SELECT ON ${quoteQualified(o.table)} TO ${r.grantee}`);
    await conn.query(`ALTER TABLE ${moved} OWNER TO genfill_owner`);
    await conn.query(`REVOKE ALL ON ${moved} FROM PUBLIC`);
    // What the owner's default privileges give a generation table it creates (migration 0006):
    // a moved table was not created by the owner, and the fleet — a plain genfill_service
    // login, never the owner — reads it (carry, reconcile) and the projector writes it.
    await conn.query(`GRANT SELECT ON ${moved} TO genfill_reader, genfill_operator, genfill_approver`);
    await conn.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${moved} TO genfill_service`);
    await insertDataset(conn, { name: o.dataset, targetTable: o.table, sourceTable: o.source, key: o.key, time: o.time });
    await insertTransform(conn, transformDigest, transformSql);
    await logDatasetAction(conn, { dataset: o.dataset, action: DATASET_ACTIONS.adoptMove, generation: o.generation, detail: { table: o.table, transform: transformDigest } });
  });
}

/** Step 2: system columns and the partition bound, without blocking readers. */

/** The unique index adopt builds concurrently on (generation, key…); it becomes the table's primary key. */
function gfKeyIndex(o: Pick<AdoptParsed, 'dataset' | 'generation'>): string {
  return quoteIdent(`${generationTable(o.dataset, o.generation).slice(0, 50)}_gf_key`);
}

async function shape(db: Db, o: AdoptParsed): Promise<void> {
  const t = qualifiedGenerationTable(o.dataset, o.generation);
  // The name genfill.add_generation looks for, so attach does not add a second CHECK.
  const check = quoteIdent(`gf_generation_${createHash('md5').update(o.generation).digest('hex')}`);
  const index = gfKeyIndex(o);
  const lit = (v: string) => `'${v.replace(/'/g, "''")}'`;
  // Constant defaults make ADD COLUMN a catalog change, not a rewrite.
  await db.query(
    `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS generation text NOT NULL DEFAULT ${lit(o.generation)},
       ADD COLUMN IF NOT EXISTS _gf_rev bigint NOT NULL DEFAULT 0,
       ADD COLUMN IF NOT EXISTS _gf_deleted boolean NOT NULL DEFAULT false`,
  );
  const { rows: has } = await db.query<{ convalidated: boolean }>(
    `SELECT convalidated FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2`,
    [t, check.slice(1, -1)],
  );
  if (has.length === 0) await db.query(`ALTER TABLE ${t} ADD CONSTRAINT ${check} CHECK (generation = ${lit(o.generation)}) NOT VALID`);
  await db.query(`ALTER TABLE ${t} VALIDATE CONSTRAINT ${check}`);
  // An interrupted CONCURRENTLY build leaves an invalid index: drop it and build again.
  const { rows: idx } = await db.query<{ valid: boolean }>(
    `SELECT i.indisvalid AS valid FROM pg_index i WHERE i.indexrelid = to_regclass($1)`,
    [`${DATA_SCHEMA}.${index}`],
  );
  if (idx[0] && !idx[0].valid) await db.query(`DROP INDEX CONCURRENTLY ${quoteIdent(DATA_SCHEMA)}.${index}`);
  await db.query(`CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ${index} ON ${t} (generation, ${o.key.map(quoteIdent).join(', ')})`);
}

async function isAttached(conn: Conn, table: string): Promise<boolean> {
  const { rowCount } = await conn.query('SELECT 1 FROM pg_inherits WHERE inhrelid = $1::regclass', [table]);
  return rowCount === 1;
}

/** Step 3: the parent, the attach, the view on the pointer row, the registry rows. */
async function attach(db: Db, o: AdoptParsed, transformDigest: string): Promise<{ rows: number; frontier: string }> {
  return withTransaction(db, async (conn) => {
    await conn.query(`SET LOCAL lock_timeout = '5s'`);
    // Readers lock the view before the table behind it; taking them in the same order keeps
    // a reader from being chosen as a deadlock victim.
    await conn.query(`LOCK TABLE ${quoteQualified(o.table)} IN ACCESS EXCLUSIVE MODE`);
    const t = qualifiedGenerationTable(o.dataset, o.generation);
    await createParent(conn, o.dataset, t, o.key);
    // A partition cannot carry a second primary key: the parent's (generation, key) becomes
    // it, backed by the unique index of step 2, so the table's own key constraint goes.
    const { rows: pk } = await conn.query<{ conname: string }>(
      `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`,
      [t],
    );
    if (!(await isAttached(conn, t))) {
      if (pk[0]) await conn.query(`ALTER TABLE ${t} DROP CONSTRAINT ${quoteIdent(pk[0].conname)}`);
      // ATTACH reuses a partition's index for the parent's primary key only when it backs a
      // primary key itself: a plain unique index is passed over and a second one built here,
      // inside this transaction, with readers locked out — and then maintained on every write.
      await conn.query(`ALTER TABLE ${t} ADD CONSTRAINT ${gfKeyIndex(o)} PRIMARY KEY USING INDEX ${gfKeyIndex(o)}`);
    }
    await conn.query(
      `INSERT INTO genfill.generations (dataset, generation, state, transform_map) VALUES ($1, $2, 'ACTIVE', $3)`,
      [o.dataset, o.generation, JSON.stringify([{ from: null, to: null, transform: transformDigest, release: null }])],
    );
    await addGeneration(conn, o.dataset, o.generation);
    await conn.query(`ALTER TABLE ${t} ALTER COLUMN generation DROP DEFAULT`);
    const res = await conn.query(`UPDATE genfill.datasets SET active_generation = $2 WHERE name = $1 AND active_generation IS NULL`, [o.dataset, o.generation]);
    if (res.rowCount !== 1) throw new RefusedError(`dataset ${o.dataset} got an active generation while adopting; nothing was attached`);
    // Same columns, same order as the plain view of step 1: CREATE OR REPLACE is allowed.
    await conn.query(`CREATE OR REPLACE VIEW ${quoteQualified(o.table)} AS ${await targetViewSql(conn, o.dataset)}`);
    const { rows } = await conn.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${t}`);
    const frontier = await recordLiveStart(conn, o);
    await logDatasetAction(conn, { dataset: o.dataset, action: DATASET_ACTIONS.adopt, generation: o.generation, detail: { rows: rows[0]!.n, transform: transformDigest, frontier } });
    return { rows: rows[0]!.n, frontier };
  });
}

/**
 * The live path starts here: capture was installed (and committed) before this transaction, so
 * its snapshot — the adopt snapshot — is the first projector frontier; every change the log
 * holds beyond it is the projector's to apply. The adopted rows are what the old pipeline last
 * wrote, not necessarily the transform of the source: they stay unverified until a drift
 * check. Idempotent: an existing frontier is kept.
 */
async function recordLiveStart(conn: Conn, o: AdoptParsed): Promise<string> {
  const { rows } = await conn.query<{ frontier: string }>(
    `WITH f AS (
       INSERT INTO genfill.frontiers (dataset, generation, snapshot) VALUES ($1, $2, pg_current_snapshot())
       ON CONFLICT (dataset, generation) DO NOTHING RETURNING snapshot)
     SELECT coalesce((SELECT snapshot FROM f), (SELECT snapshot FROM genfill.frontiers WHERE dataset = $1 AND generation = $2))::text AS frontier`,
    [o.dataset, o.generation],
  );
  const frontier = rows[0]!.frontier;
  await conn.query(
    `INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for)
     SELECT d.name, d.ingress_epoch, $2, 'adopt' FROM genfill.datasets d WHERE d.name = $1
     ON CONFLICT DO NOTHING`,
    [o.dataset, o.generation],
  );
  await conn.query(
    `INSERT INTO genfill.dataset_flags (dataset, adopt_unverified, adopt_snapshot) VALUES ($1, true, $2::pg_snapshot)
     ON CONFLICT (dataset) DO NOTHING`,
    [o.dataset, frontier],
  );
  for (const dep of o.dependencies) {
    await conn.query('INSERT INTO genfill.dataset_dependencies (dataset, relation) VALUES ($1, $2) ON CONFLICT DO NOTHING', [o.dataset, dep]);
  }
  return frontier;
}

/** Capture the source (unless it is captured or an ingress mirror) and the dependencies, before the adopt snapshot. */
async function captureForAdopt(db: Db, o: AdoptParsed): Promise<string[]> {
  const done: string[] = [];
  for (const table of [o.source, ...o.dependencies]) {
    const { rows } = await db.query<{ mode: string }>('SELECT mode FROM genfill.captures WHERE relid = to_regclass($1)', [table]);
    if (!rows[0]) await installCapture(db, { table });
    done.push(table);
  }
  return done;
}

export async function adoptDataset(db: Db, input: AdoptOptions): Promise<AdoptResult> {
  const parsed = adoptOptionsSchema.safeParse(input);
  if (!parsed.success) throw new InvalidInputError(parsed.error.issues.map((i) => ({ path: `--${String(i.path[0] ?? '')}`, message: i.message })));
  const o = parsed.data;
  let transformSql: string;
  try {
    transformSql = readFileSync(o.transformFile, 'utf8');
  } catch (err) {
    throw new InvalidInputError([{ path: '--transform', message: `cannot read ${o.transformFile}: ${(err as NodeJS.ErrnoException).code}` }]);
  }
  const transformDigest = sha256(transformSql);
  // Adopt renames the user's table and writes the registry directly: an install step for the
  // fleet's role, not a person's verb.
  if (!(await isServiceLogin(db))) {
    throw new RefusedError(
      `adopt is an install step: run it as a login that owns ${o.table} and is a member of genfill_service ` +
        '(README "Roles"); nothing was changed',
    );
  }

  // One adopt per dataset at a time, across all its steps: the dataset's adopt lock (a LOCK
  // TABLE on a genfill-only relation, which no login outside genfill can hold), held by a
  // transaction of its own while the steps run on other connections (holdLock: LOCK TABLE has
  // no session scope). `lock` is only the connection the steps' reads use.
  const held = (await holdLock(db, 'adopt', o.dataset, 'exclusive'))!;
  const lock = await db.connect().catch(async (err: unknown) => {
    await held.release();
    throw err;
  });
  try {
    let captured: string[] = [];
    const dataset = await findDataset(lock, o.dataset);
    if (dataset && (dataset.target_table !== o.table || dataset.source_table !== o.source)) {
      throw new RefusedError(`dataset ${o.dataset} is registered with target ${dataset.target_table} and source ${dataset.source_table}`);
    }
    if (dataset?.active_generation) {
      if (dataset.active_generation !== o.generation) {
        throw new RefusedError(`dataset ${o.dataset} already has active generation ${dataset.active_generation}: adopt makes only a first generation`);
      }
      const { rows } = await lock.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${qualifiedGenerationTable(o.dataset, o.generation)}`);
      // Adopted before the live path existed: capture now, and start the projector from here.
      captured = await captureForAdopt(db, o);
      const frontier = await withTransaction(db, (conn) => recordLiveStart(conn, o));
      return { status: 'already-adopted', dataset: o.dataset, generation: o.generation, rows: rows[0]!.n, frontier, captured };
    }
    const kind = await relkind(lock, o.table);
    const movedExists = (await relkind(lock, `${DATA_SCHEMA}.${quoteIdent(generationTable(o.dataset, o.generation))}`)) !== null;
    if (!(dataset && kind === 'v' && movedExists)) {
      if (dataset) throw new RefusedError(`dataset ${o.dataset} is registered but ${o.table} is not in the state an interrupted adopt leaves`);
      await preflight(lock, o, transformSql);
      captured = await captureForAdopt(db, o);
      await move(db, o, transformSql, transformDigest);
    } else if ((await lock.query(`SELECT 1 FROM genfill.transforms WHERE digest = $1`, [transformDigest])).rowCount === 0) {
      throw new RefusedError(`an interrupted adopt of ${o.dataset} used another transform file; resume it with the same file`);
    }
    if (captured.length === 0) captured = await captureForAdopt(db, o);
    await shape(db, o);
    const { rows, frontier } = await attach(db, o, transformDigest);
    return { status: 'adopted', dataset: o.dataset, generation: o.generation, rows, frontier, captured };
  } finally {
    lock.release();
    await held.release();
  }
}
