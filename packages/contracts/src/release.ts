// dataBackfillRelease.v1: an immutable release file, validated strictly (unknown keys are
// errors), with a digest over its canonical JSON and the content of every file it references.
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import canonicalize from 'canonicalize';
import { Temporal } from 'temporal-polyfill';
import { parseDocument } from 'yaml';
import { z } from 'zod';
import { InvalidInputError, type Problem } from './errors.ts';
import { computeGrid, parseEvery, parseInstant, type GridPartition } from './grid.ts';
import { checkRegionZone } from './zone.ts';

const ident = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be a plain SQL identifier (letters, digits, _)');
const qualified = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$/, 'must be schema-qualified, e.g. public.orders');
/** Release and generation ids end up in queue names and job ids: no ':' and no spaces. */
const releaseId = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$/, 'must be 1–100 characters of letters, digits and . _ @ + - (no ":" or spaces)');
const generationId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_-]{0,39}$/, 'must be 1–40 characters of lower-case letters, digits, _ and -');
const uniqueList = <T extends z.ZodType<string>>(item: T) =>
  z.array(item).refine((a) => new Set(a).size === a.length, 'must not repeat an entry');

export const WRITE_MODES = ['REPLACE_RANGE', 'UPSERT'] as const;

export const releaseSchema = z.strictObject({
  schema: z.literal('dataBackfillRelease.v1'),
  release: releaseId,
  dataset: ident,
  source: z.strictObject({
    table: qualified,
    key: uniqueList(ident).min(1, 'needs at least one key column'),
    time: ident,
  }),
  range: z.strictObject({ from: z.string(), to: z.string() }),
  timezone: z.string().min(1),
  partition: z.strictObject({
    every: z.string(),
    // Consecutive partitions whose estimated rows add up to at most this many are dispatched as
    // one job (a unit); each still gets its own claim, statement and receipt. 0 or absent: one
    // job per partition.
    batchRows: z.number().int().min(0).max(100_000_000).optional(),
  }),
  transform: z.strictObject({ sql: z.string().min(1) }),
  dependencies: uniqueList(qualified).default([]),
  target: z.strictObject({
    table: qualified,
    generation: generationId,
    expectedActive: generationId.nullable(),
    writeMode: z.enum(WRITE_MODES, {
      message: 'must be REPLACE_RANGE or UPSERT (IN_PLACE arrives with the in-place mode)',
    }),
  }),
  reconcile: z
    .strictObject({
      conserved: uniqueList(ident).default([]),
      expectedDiff: uniqueList(ident).default([]),
    })
    .default({ conserved: [], expectedDiff: [] }),
  budget: z.strictObject({
    workers: z.number().int().min(1).max(1024),
    maxRowsPerSecond: z.number().int().positive(),
    replicaLagSeconds: z.number().positive(),
    foregroundP95Ms: z.number().positive(),
  }),
  rollbackWindow: z.string().default('PT24H'),
  owner: z.string().min(1),
  approvals: z.number().int().min(0).max(16),
  deadline: z.string(),
});

export type ReleaseSpec = z.infer<typeof releaseSchema>;

export interface LoadedRelease {
  /** The parsed release with instants normalised to UTC (what the digest covers). */
  spec: ReleaseSpec;
  /** sha256 over the canonical JSON of the spec and the content of every referenced file. */
  digest: string;
  transformSql: string;
  transformDigest: string;
  grid: GridPartition[];
  file: string;
}

export function sha256(data: string | Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

function zodProblems(error: z.ZodError): Problem[] {
  return error.issues.map((i) => {
    let message = i.message;
    if (i.code === 'unrecognized_keys') message = `unknown key${i.keys.length > 1 ? 's' : ''} ${i.keys.join(', ')}`;
    return { path: i.path.join('.') || '(root)', message };
  });
}

function parseText(text: string, file: string): unknown {
  if (file.endsWith('.json')) {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new InvalidInputError([{ path: file, message: `malformed JSON: ${(err as Error).message}` }]);
    }
  }
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: true });
  if (doc.errors.length > 0) {
    throw new InvalidInputError(
      doc.errors.map((e) => ({
        path: `${file}${e.linePos ? `:${e.linePos[0].line}:${e.linePos[0].col}` : ''}`,
        message: `malformed YAML: ${e.message.split('\n')[0]}`,
      })),
    );
  }
  return doc.toJS();
}

/** Checks the schema cannot express; returns the normalised spec (instants in UTC). */
function checkSemantics(spec: ReleaseSpec): { problems: Problem[]; spec: ReleaseSpec } {
  const problems: Problem[] = [];
  const attempt = <T>(fn: () => T): T | undefined => {
    try {
      return fn();
    } catch (err) {
      if (err instanceof InvalidInputError) problems.push(...err.problems);
      else throw err;
      return undefined;
    }
  };
  const from = attempt(() => parseInstant(spec.range.from, 'range.from'));
  const to = attempt(() => parseInstant(spec.range.to, 'range.to'));
  const deadline = attempt(() => parseInstant(spec.deadline, 'deadline'));
  const timezone = attempt(() => checkRegionZone(spec.timezone, 'timezone'));
  attempt(() => parseEvery(spec.partition.every, 'partition.every'));
  attempt(() => parseEvery(spec.rollbackWindow, 'rollbackWindow'));
  if (from && to && Temporal.Instant.compare(from, to) >= 0) {
    problems.push({ path: 'range', message: `from (${spec.range.from}) must be before to (${spec.range.to}); the range is half-open [from, to)` });
  }
  if (spec.source.key.includes(spec.source.time)) {
    problems.push({ path: 'source.time', message: 'the time column must not be part of the key' });
  }
  // UPSERT (inside the range, keys the transform does not produce keep the old generation's
  // rows) is not built: the projector, catch-up and carry all write REPLACE_RANGE's meaning, so
  // accepting it would silently drop those rows. Refused rather than ignored.
  if (spec.target.writeMode === 'UPSERT') {
    problems.push({
      path: 'target.writeMode',
      message: 'UPSERT is not supported yet (keys the transform does not produce would be dropped, not kept): use REPLACE_RANGE, or make the transform produce every key of the range',
    });
  }
  for (const c of spec.reconcile.conserved) {
    if (spec.reconcile.expectedDiff.includes(c)) {
      problems.push({ path: 'reconcile.conserved', message: `${c} is both conserved and an expected difference` });
    }
  }
  for (const c of [...spec.reconcile.conserved, ...spec.reconcile.expectedDiff]) {
    if (spec.source.key.includes(c)) problems.push({ path: 'reconcile', message: `${c} is a key column; keys are checked as a set, not as a value` });
  }
  if (spec.target.expectedActive === spec.target.generation) {
    problems.push({ path: 'target.generation', message: 'the candidate generation must differ from expectedActive' });
  }
  if (spec.dependencies.includes(spec.source.table)) {
    problems.push({ path: 'dependencies', message: `${spec.source.table} is the source, not a dependency` });
  }
  if (spec.target.table === spec.source.table) {
    problems.push({ path: 'target.table', message: 'the target must not be the source table' });
  }
  const normalised: ReleaseSpec = {
    ...spec,
    timezone: timezone ?? spec.timezone,
    range: { from: from?.toString() ?? spec.range.from, to: to?.toString() ?? spec.range.to },
    deadline: deadline?.toString() ?? spec.deadline,
  };
  return { problems, spec: normalised };
}

/**
 * Read, validate and digest a release file. Throws InvalidInputError listing every problem
 * with its path; reads nothing but the file and the files it references.
 */
export function loadRelease(file: string): LoadedRelease {
  const path = resolve(file);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new InvalidInputError([{ path: file, message: `cannot read the release file: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }]);
  }
  const raw = parseText(text, file);
  const parsed = releaseSchema.safeParse(raw);
  if (!parsed.success) throw new InvalidInputError(zodProblems(parsed.error));
  const { problems, spec } = checkSemantics(parsed.data);

  const transformPath = resolve(dirname(path), spec.transform.sql);
  let transformSql = '';
  try {
    if (!statSync(transformPath).isFile()) throw new Error('not a file');
    transformSql = readFileSync(transformPath, 'utf8');
    if (transformSql.trim() === '') problems.push({ path: 'transform.sql', message: `${spec.transform.sql} is empty` });
  } catch (err) {
    problems.push({
      path: 'transform.sql',
      message: `cannot read ${spec.transform.sql} (relative to the release file): ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    });
  }
  let grid: GridPartition[] = [];
  if (problems.length === 0) {
    try {
      grid = computeGrid({ from: spec.range.from, to: spec.range.to, timezone: spec.timezone, every: spec.partition.every });
    } catch (err) {
      if (err instanceof InvalidInputError) problems.push(...err.problems);
      else throw err;
    }
  }
  if (problems.length > 0) throw new InvalidInputError(problems);

  const transformDigest = sha256(transformSql);
  const digest = sha256(canonicalize({ release: spec, files: { [spec.transform.sql]: transformDigest } })!);
  return { spec, digest, transformSql, transformDigest, grid, file };
}
