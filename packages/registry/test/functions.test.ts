// Every SQL function of the registry has one current definition, in sql/functions/ (sql/README.md):
// `migrate` applies the files after the numbered migrations on every run and records their
// sha256, and the other commands refuse a database whose recorded files are not the code's.
// These tests read the files with PostgreSQL's own parser (libpg-query) and compare them with
// the catalog of a freshly migrated database.
import { SchemaVersionError } from '@genfill/contracts';
import { loadModule, parseSync } from 'libpg-query';
import type pg from 'pg';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { assertSchemaCurrent, knownFunctionFiles, LATEST_VERSION, migrate } from '../src/migrate.ts';

const db = await createTestDatabase('functions');
beforeEach(() => keepOnFailure(db));

/** One CREATE FUNCTION or CREATE AGGREGATE of a function file. */
interface Definition {
  file: string;
  kind: 'function' | 'aggregate';
  /** For to_regprocedure: genfill.name(type, …) with the input argument types as parsed. */
  signature: string;
  /** The statement's text. */
  statement: string;
  /** The AS '…' body (prosrc), or null for a SQL-standard body (RETURN …, BEGIN ATOMIC …). */
  body: string | null;
}

/** A trigger a function file creates (CREATE OR REPLACE TRIGGER name … ON table). */
interface TriggerDefinition {
  file: string;
  name: string;
  table: string;
}

const INPUT_MODES = new Set(['FUNC_PARAM_DEFAULT', 'FUNC_PARAM_IN', 'FUNC_PARAM_INOUT', 'FUNC_PARAM_VARIADIC']);

const names = (list: any[]): string[] => list.map((n) => n.String.sval as string);
const typeText = (t: any): string => names(t.names).join('.') + '[]'.repeat(t.arrayBounds?.length ?? 0);
const inputTypes = (params: any[]): string[] =>
  params.map((p) => p.FunctionParameter).filter((p) => INPUT_MODES.has(p.mode)).map((p) => typeText(p.argType));

function parseFiles(): { definitions: Definition[]; triggers: TriggerDefinition[] } {
  const definitions: Definition[] = [];
  const triggers: TriggerDefinition[] = [];
  for (const f of knownFunctionFiles()) {
    const bytes = Buffer.from(f.sql, 'utf8');
    for (const raw of parseSync(f.sql).stmts ?? []) {
      const start = raw.stmt_location ?? 0;
      const statement = bytes.subarray(start, raw.stmt_len ? start + raw.stmt_len : bytes.length).toString('utf8');
      const stmt = raw.stmt as any;
      if (stmt.CreateFunctionStmt) {
        const s = stmt.CreateFunctionStmt;
        const as = (s.options ?? []).map((o: any) => o.DefElem).find((d: any) => d.defname === 'as');
        definitions.push({
          file: f.name,
          kind: 'function',
          signature: `${names(s.funcname).join('.')}(${inputTypes(s.parameters ?? []).join(', ')})`,
          statement,
          body: as ? (as.arg.List.items[0].String.sval as string) : null,
        });
      } else if (stmt.DefineStmt?.kind === 'OBJECT_AGGREGATE') {
        const s = stmt.DefineStmt;
        definitions.push({
          file: f.name,
          kind: 'aggregate',
          signature: `${names(s.defnames).join('.')}(${inputTypes(s.args[0].List.items).join(', ')})`,
          statement,
          body: null,
        });
      } else if (stmt.CreateTrigStmt) {
        const s = stmt.CreateTrigStmt;
        triggers.push({ file: f.name, name: s.trigname, table: `${s.relation.schemaname}.${s.relation.relname}` });
      }
    }
  }
  return { definitions, triggers };
}

let definitions: Definition[] = [];
let triggers: TriggerDefinition[] = [];

beforeAll(async () => {
  await loadModule();
  ({ definitions, triggers } = parseFiles());
  await migrate(db.pool);
});

/** Run `fn` in a transaction that is rolled back afterwards. */
async function rolledBack<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    return await fn(client);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

const oidOf = async (c: pg.ClientBase | pg.Pool, signature: string): Promise<string | null> =>
  (await c.query<{ oid: string | null }>('SELECT to_regprocedure($1)::oid::text AS oid', [signature])).rows[0]!.oid;

const sqlBodyOf = async (c: pg.ClientBase | pg.Pool, oid: string): Promise<string | null> =>
  (await c.query<{ body: string | null }>('SELECT pg_get_function_sqlbody($1::oid) AS body', [oid])).rows[0]!.body;

/** Every routine of schema genfill that is not an extension's (btree_gist lives there too). */
const ROUTINES = `
  SELECT p.oid::text AS oid, p.oid::regprocedure::text AS signature, p.prokind AS kind
    FROM pg_proc p
   WHERE p.pronamespace = 'genfill'::regnamespace
     AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
   ORDER BY 2`;

/** What a run of migrate could change: the routines, their grants and comments, the triggers, the event triggers. */
async function catalog() {
  const routines = await db.pool.query(`
    SELECT p.oid::text AS oid, p.oid::regprocedure::text AS signature,
           CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) END AS definition,
           pg_get_userbyid(p.proowner) AS owner, p.proacl::text AS acl, p.proconfig AS config,
           obj_description(p.oid, 'pg_proc') AS comment
      FROM pg_proc p WHERE p.oid IN (SELECT oid::oid FROM (${ROUTINES}) r)
     ORDER BY 2`);
  const tableTriggers = await db.pool.query(`
    SELECT t.tgrelid::regclass::text AS "table", t.tgname AS name, t.tgenabled AS enabled, pg_get_triggerdef(t.oid) AS definition
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = 'genfill'::regnamespace AND NOT t.tgisinternal
     ORDER BY 1, 2`);
  const eventTriggers = await db.pool.query(`
    SELECT e.evtname AS name, e.evtevent AS event, e.evtfoid::regproc::text AS function, e.evtenabled AS enabled, e.evttags AS tags
      FROM pg_event_trigger e ORDER BY 1`);
  return { routines: routines.rows, triggers: tableTriggers.rows, eventTriggers: eventTriggers.rows };
}

describe('function files', () => {
  it('each hold the body the database runs for the function they create, after migrate', async () => {
    const functions = definitions.filter((d) => d.kind === 'function');
    expect(functions.length).toBeGreaterThan(80);
    for (const d of functions) {
      const oid = await oidOf(db.pool, d.signature);
      expect(oid, `${d.file}: ${d.signature} is not in the database`).not.toBeNull();
      const { rows } = await db.pool.query<{ prosrc: string }>('SELECT prosrc FROM pg_proc WHERE oid = $1::oid', [oid]);
      if (d.body !== null) {
        expect(rows[0]!.prosrc, `${d.file}: the body of ${d.signature}`).toBe(d.body);
      } else {
        // A SQL-standard body is stored parsed (prosrc is empty): the file's statement, run
        // again, must leave the stored body as it is.
        expect(rows[0]!.prosrc).toBe('');
        const stored = await sqlBodyOf(db.pool, oid!);
        const fromFile = await rolledBack(async (c) => {
          await c.query(d.statement);
          return sqlBodyOf(c, oid!);
        });
        expect(fromFile, `${d.file}: the body of ${d.signature}`).toBe(stored);
      }
    }
  });

  it('define every function of schema genfill exactly once, so an overload a migration left behind fails', async () => {
    const routines = (await db.pool.query<{ oid: string; signature: string; kind: string }>(ROUTINES)).rows;
    const definedBy = new Map<string, string[]>(routines.map((r) => [r.oid, []]));
    const unresolved: string[] = [];
    for (const d of definitions) {
      const oid = await oidOf(db.pool, d.signature);
      if (oid === null || !definedBy.has(oid)) unresolved.push(`${d.file}: ${d.signature}`);
      else definedBy.get(oid)!.push(d.file);
    }
    expect(unresolved).toEqual([]);
    const notOnce = routines
      .filter((r) => definedBy.get(r.oid)!.length !== 1)
      .map((r) => `${r.signature} in ${JSON.stringify(definedBy.get(r.oid))}`);
    expect(notOnce).toEqual([]);
  });

  it('compile with check_function_bodies on, which migrate turns off so that files may use each other in any order', async () => {
    await rolledBack(async (c) => {
      await c.query('SET LOCAL check_function_bodies = on');
      for (const f of knownFunctionFiles()) {
        await expect(c.query(f.sql).then(() => f.name), f.name).resolves.toBe(f.name);
      }
    });
  });
});

describe('migrate', () => {
  it('run again changes nothing and leaves every trigger and event trigger defined once', async () => {
    const before = await catalog();
    expect(await migrate(db.pool)).toEqual({ applied: [], version: LATEST_VERSION, functions: [], requestKinds: [], settings: [] });
    const after = await catalog();
    expect(after).toEqual(before);
    const byTable = new Map<string, number>();
    for (const t of after.triggers) byTable.set(`${t.table}.${t.name}`, (byTable.get(`${t.table}.${t.name}`) ?? 0) + 1);
    for (const t of triggers) expect(byTable.get(`${t.table}.${t.name}`), `${t.file}: trigger ${t.name} on ${t.table}`).toBe(1);
    expect(after.eventTriggers.map((e) => e.name)).toEqual([
      'genfill_capture_ddl_drop',
      'genfill_capture_ddl_end',
      'genfill_capture_ddl_rewrite',
      'genfill_capture_ddl_start',
      'genfill_capture_ddl_type_end',
      'genfill_capture_ddl_type_start',
    ]);
  });

  it('records the sha256 of every function file it applied', async () => {
    const { rows } = await db.pool.query<{ name: string; sha256: string }>('SELECT name, sha256 FROM genfill.function_files ORDER BY name');
    expect(rows).toEqual(knownFunctionFiles().map((f) => ({ name: f.name, sha256: f.sha256 })));
  });
});

describe('the schema check of every other command', () => {
  it('refuses a database whose recorded function file differs from this genfill, saying to run genfill migrate', async () => {
    await assertSchemaCurrent(db.pool);
    await db.pool.query(`UPDATE genfill.function_files SET sha256 = repeat('0', 64) WHERE name = 'request.sql'`);
    const refusal = await assertSchemaCurrent(db.pool).catch((err: unknown) => err);
    expect(refusal).toBeInstanceOf(SchemaVersionError);
    expect((refusal as Error).message).toMatch(/differ: request\.sql\): run `genfill migrate`/);

    expect((await migrate(db.pool)).functions).toEqual(['request.sql']);
    await assertSchemaCurrent(db.pool);
  });

  it('refuses a file migrate never applied and one this genfill does not have, until migrate records the files again', async () => {
    await db.pool.query(`DELETE FROM genfill.function_files WHERE name = 'take_lock.sql'`);
    await db.pool.query(`INSERT INTO genfill.function_files (name, sha256) VALUES ('dropped_long_ago.sql', repeat('a', 64))`);
    const refusal = await assertSchemaCurrent(db.pool).catch((err: unknown) => err);
    expect(refusal).toBeInstanceOf(SchemaVersionError);
    expect((refusal as Error).message).toMatch(/never applied: take_lock\.sql; unknown to this genfill: dropped_long_ago\.sql\): run `genfill migrate`/);

    expect((await migrate(db.pool)).functions).toEqual(['take_lock.sql']);
    await assertSchemaCurrent(db.pool);
    const { rows } = await db.pool.query(`SELECT 1 FROM genfill.function_files WHERE name = 'dropped_long_ago.sql'`);
    expect(rows).toEqual([]);
  });
});
