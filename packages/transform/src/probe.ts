// The transform checks that need the database: it is planned for real (as a temporary view
// inside a transaction that is always rolled back), and PostgreSQL's own dependency records
// say which functions and relations it uses and what columns it produces. This sees what
// the static check cannot: user functions' volatility, unqualified names resolved through
// search_path, and output types.
import { randomBytes } from 'node:crypto';
import type { Problem } from '@genfill/contracts';
import { parse } from 'libpg-query';
import pg from 'pg';
import type { ClientBase } from 'pg';
import { quoteIdent } from '@genfill/contracts';
import { relationColumns } from '@genfill/registry';
import { describeCharIndex } from './position.ts';
import { TRANSFORM_PATH, parseSingleSelect } from './static.ts';
import { stripTrailingSemicolons, wrapPrefix, wrapTransform } from './wrap.ts';

export interface ProbeOptions {
  sql: string;
  /** Schema-qualified, as in the release (`public.orders`). */
  sourceTable: string;
  key: string[];
  time: string;
  /** Schema-qualified names of the tables the transform may read besides source. */
  dependencies: string[];
  /** Checked only when the table exists (a first generation may create it). */
  target?: { table: string; ignoreColumns?: string[] };
}

export interface OutputColumn {
  name: string;
  /** format_type(), e.g. `bigint`, `numeric(12,2)`, `timestamp with time zone`. */
  type: string;
  notNull?: boolean;
}

export interface ProbeResult {
  problems: Problem[];
  columns: OutputColumn[];
  /** Volatile functions the transform calls (directly or behind operators), schema-qualified. */
  volatileFunctions: string[];
  /** Every relation the transform reads, the source table included, schema-qualified. */
  relations: string[];
  /** The problems (also in `problems`) of relations read but not declared in dependencies. */
  undeclared: Problem[];
}

interface Relation {
  oid: string;
  /** format('%I.%I'): safe to put into SQL text. */
  name: string;
}

// Planning a query should take well under a second; these bound a probe that meets a lock
// held by a migration, or a pathological plan, instead of letting it hang a validation.
const LOCK_TIMEOUT = '5s';
const STATEMENT_TIMEOUT = '30s';

/**
 * Runs the database checks on a connected client that is not inside a transaction (this opens
 * and always rolls back its own). Problems are returned; only operational failures (lost
 * connection, timeouts) throw.
 */
export async function probeTransform(client: ClientBase, opts: ProbeOptions): Promise<ProbeResult> {
  const result: ProbeResult = { problems: [], columns: [], volatileFunctions: [], relations: [], undeclared: [] };
  const problem = (path: string, message: string): void => void result.problems.push({ path, message });

  const source = await resolveRelation(client, opts.sourceTable, 'source.table', 'source table', problem);
  const allowed = new Set<string>();
  for (const [i, dep] of opts.dependencies.entries()) {
    const rel = await resolveRelation(client, dep, `dependencies[${i}]`, 'dependency', problem);
    if (rel) allowed.add(rel.oid);
  }
  // A missing target is fine (a first generation creates it); a malformed name is not.
  const target = opts.target
    ? await resolveRelation(client, opts.target.table, 'target.table', 'target table', problem, false)
    : undefined;
  if (!source) return result;

  // The transform is pasted into SQL text, so it must not be able to close the wrapper's
  // parentheses and append statements of its own: parse it alone, then parse what runs.
  const alone = await parseSingleSelect(opts.sql);
  if ('problem' in alone) {
    problem(TRANSFORM_PATH, alone.problem);
    return result;
  }
  const tag = randomBytes(6).toString('hex');
  const view = quoteIdent(`genfill_probe_${tag}`);
  // The probe's `source` is an empty copy of the source table's shape, so a transform that
  // reads the live table directly (which may hold newer rows than the partition) shows up
  // as a dependency on that table.
  const sourceCopy = `pg_temp.${quoteIdent(`genfill_probe_source_${tag}`)}`;
  const sourceSql = `SELECT * FROM ${sourceCopy}`;
  const body = stripTrailingSemicolons(opts.sql);
  const wrapped = wrapTransform(opts.sql, sourceSql);
  const createView = `CREATE TEMP VIEW ${view} AS ${wrapped}`;
  if (!(await isSingleStatement(createView, 'ViewStmt'))) {
    problem(TRANSFORM_PATH, 'does not stay inside the parentheses genfill wraps it in (check comments and quotes)');
    return result;
  }
  const at = (prefix: string) => ({ body, offset: prefix.length + wrapPrefix(sourceSql).length });

  let failure: unknown;
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
    await client.query(`SET LOCAL statement_timeout = '${STATEMENT_TIMEOUT}'`);
    await client.query(`CREATE TEMP TABLE ${sourceCopy} (LIKE ${source.name})`);
    if (await userStatement(client, createView, at(`CREATE TEMP VIEW ${view} AS `), problem)) {
      await inspectView(client, view, sourceCopy, source, allowed, result, problem);
      checkColumns(result.columns, opts, problem);
      if (target && opts.target) await checkTarget(client, target, opts.target.ignoreColumns ?? [], result.columns, problem);
      // Creating the view only parses and analyses; planning and starting execution can fail
      // too (constant folding of `1/0`, a function that raises while being inlined).
      const run = 'SELECT * FROM (';
      await userStatement(client, `${run}${wrapped}) AS q LIMIT 0`, at(run), problem);
    }
  } catch (err) {
    failure = err;
  }
  try {
    await client.query('ROLLBACK');
  } catch (err) {
    failure ??= err;
  }
  if (failure !== undefined) throw failure;
  return result;
}

async function resolveRelation(
  client: ClientBase,
  name: string,
  path: string,
  what: string,
  problem: (path: string, message: string) => void,
  mustExist = true,
): Promise<Relation | undefined> {
  try {
    const { rows } = await client.query<Relation>(
      `SELECT c.oid::text AS oid, format('%I.%I', n.nspname, c.relname) AS name
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = to_regclass($1)`,
      [name],
    );
    if (rows[0]) return rows[0];
    if (mustExist) problem(path, `${what} ${name} does not exist`);
  } catch (err) {
    // to_regclass returns null for a missing table but raises on a malformed name.
    if (!isUserError(err)) throw err;
    problem(path, `${what} ${JSON.stringify(name)} is not a valid table name: ${err.message}`);
  }
  return undefined;
}

async function isSingleStatement(sql: string, kind: string): Promise<boolean> {
  try {
    const stmts = (await parse(sql)).stmts ?? [];
    return stmts.length === 1 && stmts[0]?.stmt !== undefined && kind in stmts[0].stmt;
  } catch {
    return false;
  }
}

/**
 * Runs a statement containing the user's SQL. A PostgreSQL error is the transform's problem
 * and is recorded (with its position mapped back into the transform file); the transaction
 * is then aborted, so the caller must stop issuing statements. Returns whether it succeeded.
 */
async function userStatement(
  client: ClientBase,
  sql: string,
  where: { body: string; offset: number },
  problem: (path: string, message: string) => void,
): Promise<boolean> {
  try {
    await client.query(sql);
    return true;
  } catch (err) {
    if (!isUserError(err)) throw err;
    // A server error position counts characters from 1 in the statement sent.
    const index = Number(err.position) - 1 - where.offset;
    const place = err.position && index >= 0 && index <= where.body.length ? `${describeCharIndex(where.body, index)}: ` : '';
    problem(TRANSFORM_PATH, `${place}PostgreSQL rejects the transform: ${err.message}`);
    return false;
  }
}

/** Errors caused by the SQL itself, as opposed to the connection, the server or a timeout. */
function isUserError(err: unknown): err is pg.DatabaseError {
  if (!(err instanceof pg.DatabaseError) || typeof err.code !== 'string') return false;
  const operational = ['08', '53', '55', '57', '58', 'XX'];
  return !operational.includes(err.code.slice(0, 2));
}

async function inspectView(
  client: ClientBase,
  view: string,
  sourceCopy: string,
  source: Relation,
  allowed: ReadonlySet<string>,
  result: ProbeResult,
  problem: (path: string, message: string) => void,
): Promise<void> {
  const ids = await client.query<{ view: string; rule: string; copy: string }>(
    `SELECT v.oid::text AS view, r.oid::text AS rule, to_regclass($2)::oid::text AS copy
       FROM pg_class v JOIN pg_rewrite r ON r.ev_class = v.oid AND r.rulename = '_RETURN'
      WHERE v.oid = to_regclass($1)`,
    [`pg_temp.${view}`, sourceCopy],
  );
  const id = ids.rows[0];
  if (!id) throw new Error(`the probe view ${view} was created but cannot be found`);

  const columns = await relationColumns(client, Number(id.view));
  result.columns = columns.map(({ name, type }) => ({ name, type }));

  // pg_depend alone is not enough: PostgreSQL records no dependencies on built-in (pinned)
  // objects, so random() or pg_class never appear there. The view's stored query tree names
  // every function it calls (function calls, operators' functions, aggregates, window
  // functions) and every relation it reads, by oid; pg_depend adds user objects on top.
  const functions = await client.query<{ name: string }>(
    `WITH tree AS (SELECT ev_action::text AS t FROM pg_rewrite WHERE oid = $1::oid),
     called AS (
       SELECT m[2]::oid AS fn FROM tree, regexp_matches(tree.t, ':(funcid|opfuncid|aggfnoid|winfnoid) (\\d+)', 'g') m
       UNION
       SELECT o.oprcode::oid FROM tree, regexp_matches(tree.t, ':opno (\\d+)', 'g') m
         JOIN pg_operator o ON o.oid = m[1]::oid
       UNION
       SELECT d.refobjid FROM pg_depend d
        WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = $1::oid AND d.refclassid = 'pg_proc'::regclass
       UNION
       SELECT o.oprcode::oid FROM pg_depend d JOIN pg_operator o ON o.oid = d.refobjid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = $1::oid AND d.refclassid = 'pg_operator'::regclass
     )
     SELECT DISTINCT format('%I.%I', n.nspname, p.proname) AS name
       FROM called JOIN pg_proc p ON p.oid = called.fn JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE p.provolatile = 'v'
      ORDER BY 1`,
    [id.rule],
  );
  result.volatileFunctions = functions.rows.map((r) => r.name);
  for (const name of result.volatileFunctions) {
    const why = 'its result may change on every call: a transform must be deterministic';
    problem(TRANSFORM_PATH, `calls ${name}(), which is VOLATILE (${why})`);
  }

  const relations = await client.query<Relation>(
    `WITH tree AS (SELECT ev_action::text AS t FROM pg_rewrite WHERE oid = $1::oid),
     used AS (
       SELECT m[1]::oid AS rel FROM tree, regexp_matches(tree.t, ':relid (\\d+)', 'g') m
       UNION
       SELECT d.refobjid FROM pg_depend d
        WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = $1::oid AND d.refclassid = 'pg_class'::regclass
     )
     SELECT c.oid::text AS oid, format('%I.%I', n.nspname, c.relname) AS name
       FROM used JOIN pg_class c ON c.oid = used.rel JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.oid <> $2::oid AND c.oid <> $3::oid
      ORDER BY 2`,
    [id.rule, id.view, id.copy],
  );
  result.relations = [...new Set([source.name, ...relations.rows.map((r) => r.name)])].sort();
  for (const rel of relations.rows) {
    if (rel.oid === source.oid) {
      problem(
        TRANSFORM_PATH,
        `reads the source table ${rel.name} directly: read source instead (the live table may hold newer rows than the partition)`,
      );
    } else if (!allowed.has(rel.oid)) {
      problem(TRANSFORM_PATH, `reads ${rel.name}, which is not declared in dependencies`);
      result.undeclared.push(result.problems.at(-1)!);
    }
  }
}

function checkColumns(
  columns: readonly OutputColumn[],
  opts: ProbeOptions,
  problem: (path: string, message: string) => void,
): void {
  const names = new Set(columns.map((c) => c.name));
  for (const key of opts.key) {
    if (!names.has(key)) problem(TRANSFORM_PATH, `output has no column ${key}, which is part of the source key`);
  }
  if (!names.has(opts.time)) problem(TRANSFORM_PATH, `output has no column ${opts.time}, the source time column`);
}

async function checkTarget(
  client: ClientBase,
  target: Relation,
  ignore: readonly string[],
  output: readonly OutputColumn[],
  problem: (path: string, message: string) => void,
): Promise<void> {
  const rows = await relationColumns(client, Number(target.oid));
  const ignored = new Set(ignore);
  const wanted = new Map(rows.filter((c) => !ignored.has(c.name)).map((c) => [c.name, c.type]));
  const produced = new Map(output.map((c) => [c.name, c.type]));
  for (const [name, type] of wanted) {
    const got = produced.get(name);
    if (got === undefined) problem(TRANSFORM_PATH, `output lacks column ${name} (${type}) of target ${target.name}`);
    else if (got !== type) {
      problem(TRANSFORM_PATH, `output column ${name} is ${got} but target ${target.name} has ${type}; cast it`);
    }
  }
  for (const [name, type] of produced) {
    if (!wanted.has(name)) problem(TRANSFORM_PATH, `output column ${name} (${type}) is not a column of target ${target.name}`);
  }
}
