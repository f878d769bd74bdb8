// The transform checks that need the database: it is planned for real (as a temporary view
// inside a transaction that is always rolled back), and PostgreSQL's own dependency records
// say which functions and relations it uses and what columns it produces. This sees what
// the static check cannot: user functions' volatility, unqualified names resolved through
// search_path, and output types.
//
// Every service runs this again before it turns stored transform text into SQL (admit.ts), so
// it must also hold when the text was never checked by the CLI: the function rule below refuses
// built-ins that run SQL or read files and server state (rules.ts deniedBuiltin) and every
// function outside pg_catalog the owner did not allow-list in genfill.transform_functions —
// functions run with the caller's rights, the service's, so a user function could read what
// the relation rule forbids. Inside a caller's transaction (a projector batch, a build) the
// probe works under a savepoint instead of its own transaction, and only ever lowers the
// caller's timeouts. Every statement carrying the transform goes over the extended protocol.
import { randomBytes } from 'node:crypto';
import type { Problem } from '@genfill/contracts';
import { parse } from 'libpg-query';
import pg from 'pg';
import type { ClientBase } from 'pg';
import { quoteIdent } from '@genfill/contracts';
import { relationColumns } from '@genfill/registry';
import { describeCharIndex } from './position.ts';
import { ALLOW_LIST, deniedBuiltin } from './rules.ts';
import { queryUserSql } from './user-sql.ts';
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
  /** Functions refused by the function rule (denied built-ins, user functions not allow-listed), as regprocedure text. */
  refusedFunctions: string[];
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
  const result: ProbeResult = { problems: [], columns: [], volatileFunctions: [], refusedFunctions: [], relations: [], undeclared: [] };
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

  // Inside the caller's transaction (a batch, a build, a plan) a savepoint stands in for the
  // probe's own transaction; outside one, BEGIN … ROLLBACK. Either way nothing stays behind.
  const status = client.getTransactionStatus?.() ?? 'I';
  if (status === 'E') throw new Error('the transform probe was called inside a failed transaction');
  const nested = status === 'T';
  let failure: unknown;
  try {
    await client.query(nested ? 'SAVEPOINT genfill_probe' : 'BEGIN');
    await lowerTimeout(client, 'lock_timeout', LOCK_TIMEOUT);
    await lowerTimeout(client, 'statement_timeout', STATEMENT_TIMEOUT);
    await client.query(`CREATE TEMP TABLE ${sourceCopy} (LIKE ${source.name})`);
    if (await userStatement(client, createView, at(`CREATE TEMP VIEW ${view} AS `), problem)) {
      const before = result.problems.length;
      await inspectView(client, view, sourceCopy, source, allowed, result, problem);
      // No refused function and no relation beyond source and the dependencies.
      const mayRun = result.problems.length === before;
      checkColumns(result.columns, opts, problem);
      if (target && opts.target) await checkTarget(client, target, opts.target.ignoreColumns ?? [], result.columns, problem);
      // Creating the view only parses and analyses; planning and starting execution can fail
      // too (constant folding of `1/0`, a function that raises while being inlined). Planning
      // runs IMMUTABLE functions on constants, so a refused function or relation stops here.
      if (mayRun) {
        const run = 'SELECT * FROM (';
        await userStatement(client, `${run}${wrapped}) AS q LIMIT 0`, at(run), problem);
      }
    }
  } catch (err) {
    failure = err;
  }
  try {
    if (nested) {
      await client.query('ROLLBACK TO SAVEPOINT genfill_probe');
      await client.query('RELEASE SAVEPOINT genfill_probe');
    } else {
      await client.query('ROLLBACK');
    }
  } catch (err) {
    failure ??= err;
  }
  if (failure !== undefined) throw failure;
  return result;
}

/** SET LOCAL a timeout, unless the caller's is already shorter (a cutover's remaining window). */
async function lowerTimeout(client: ClientBase, name: 'lock_timeout' | 'statement_timeout', value: string): Promise<void> {
  await client.query(
    `SELECT set_config($1, $2, true)
      WHERE current_setting($1)::interval = interval '0' OR current_setting($1)::interval > $2::interval`,
    [name, value],
  );
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
    await queryUserSql(client, sql);
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
  const functions = await client.query<{ oid: string; name: string; signature: string; schema: string; proname: string; volatile: boolean }>(
    `WITH tree AS (SELECT ev_action::text AS t FROM pg_rewrite WHERE oid = $1::oid),
     ops AS (
       SELECT m[2]::oid AS op FROM tree, regexp_matches(tree.t, ':(opno|eqop|sortop) (\\d+)', 'g') m
       UNION
       SELECT x::oid FROM tree, regexp_matches(tree.t, ':opnos \\(o ([0-9 ]+)\\)', 'g') m, regexp_split_to_table(trim(m[1]), ' +') x
       UNION
       SELECT d.refobjid FROM pg_depend d
        WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = $1::oid AND d.refclassid = 'pg_operator'::regclass
     ),
     called AS (
       SELECT m[2]::oid AS fn FROM tree, regexp_matches(tree.t, ':(funcid|opfuncid|aggfnoid|winfnoid|hashfuncid|negfuncid) (\\d+)', 'g') m
       UNION
       SELECT o.oprcode::oid FROM ops JOIN pg_operator o ON o.oid = ops.op
       UNION
       SELECT d.refobjid FROM pg_depend d
        WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = $1::oid AND d.refclassid = 'pg_proc'::regclass
     )
     SELECT DISTINCT p.oid::text AS oid, format('%I.%I', n.nspname, p.proname) AS name, format('%I.%I(%s)', n.nspname, p.proname, oidvectortypes(p.proargtypes)) AS signature,
            n.nspname::text AS schema, p.proname::text AS proname, p.provolatile = 'v' AS volatile
       FROM called JOIN pg_proc p ON p.oid = called.fn JOIN pg_namespace n ON n.oid = p.pronamespace
      ORDER BY 2, 3`,
    [id.rule],
  );
  result.volatileFunctions = [...new Set(functions.rows.filter((f) => f.volatile).map((r) => r.name))];
  for (const name of result.volatileFunctions) {
    const why = 'its result may change on every call: a transform must be deterministic';
    problem(TRANSFORM_PATH, `calls ${name}(), which is VOLATILE (${why})`);
  }
  const allowList = await allowListed(client);
  for (const f of functions.rows) {
    if (f.schema === 'pg_catalog') {
      const denied = deniedBuiltin(f.proname);
      if (!denied) continue;
      result.refusedFunctions.push(f.signature);
      problem(TRANSFORM_PATH, `calls ${f.name}(), which ${denied}: a transform may not call it (it would run with the service's rights)`);
    } else if (!allowList.has(f.oid) && !f.volatile) {
      // (A VOLATILE one is refused above already: one problem per function.)
      result.refusedFunctions.push(f.signature);
      problem(
        TRANSFORM_PATH,
        `calls ${f.signature}, which is not a built-in and not in ${ALLOW_LIST}: a function runs with the service's rights, so only ` +
          `functions the owner allow-listed may be called — as genfill_owner: INSERT INTO ${ALLOW_LIST} (function, reason) VALUES ('${f.signature.replace(/'/g, "''")}', '<why it is safe>')`,
      );
    }
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

/** The oids of the functions the owner allow-listed (none on a database without the table). */
async function allowListed(client: ClientBase): Promise<Set<string>> {
  const { rows: exists } = await client.query<{ ok: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS ok`, [ALLOW_LIST]);
  if (!exists[0]?.ok) return new Set();
  const { rows } = await client.query<{ oid: string }>(`SELECT function::oid::text AS oid FROM ${ALLOW_LIST}`);
  return new Set(rows.map((r) => r.oid));
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
