// Numbered, add-only migrations applied in one transaction under an advisory lock; the ledger
// row goes in first so a second runner that somehow got past the lock clashes on the key
// (graphile-worker's migrate.ts does the same). A database newer than this code is refused.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SchemaVersionError } from '@genfill/contracts';
import { withTransaction, type Conn, type Db } from './db.ts';

const MIGRATIONS_DIR = fileURLToPath(new URL('../migrations/', import.meta.url));
// Any fixed 64-bit key works; this one is 'genfill' in ASCII.
const MIGRATE_LOCK = '29103447440190572';

export interface Migration {
  version: number;
  name: string;
  sql: string;
  sha256: string;
}

export function knownMigrations(): Migration[] {
  return readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f, i) => {
      const version = Number(f.slice(0, 4));
      if (version !== i + 1) throw new Error(`migration ${f} is out of sequence: expected ${String(i + 1).padStart(4, '0')}`);
      const sql = readFileSync(MIGRATIONS_DIR + f, 'utf8');
      return { version, name: f.replace(/\.sql$/, ''), sql, sha256: createHash('sha256').update(sql).digest('hex') };
    });
}

export const LATEST_VERSION = knownMigrations().length;

interface Applied {
  version: number;
  name: string;
  sha256: string;
}

async function appliedMigrations(conn: Conn): Promise<Applied[] | null> {
  const exists = await conn.query(`SELECT to_regclass('genfill.migrations') IS NOT NULL AS ok`);
  if (!exists.rows[0].ok) return null;
  const { rows } = await conn.query<Applied>('SELECT version, name, sha256 FROM genfill.migrations ORDER BY version');
  return rows;
}

function refuseNewer(applied: Applied[]): void {
  const newest = applied.at(-1)?.version ?? 0;
  if (newest > LATEST_VERSION) {
    throw new SchemaVersionError(
      `the database schema is at version ${newest}, newer than this genfill knows (${LATEST_VERSION}): upgrade genfill before running it against this database`,
    );
  }
}

export interface MigrateResult {
  applied: string[];
  version: number;
}

export async function migrate(db: Db): Promise<MigrateResult> {
  return withTransaction(db, async (conn) => {
    await conn.query(`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK})`);
    await conn.query('CREATE SCHEMA IF NOT EXISTS genfill');
    await conn.query(`
      CREATE TABLE IF NOT EXISTS genfill.migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        sha256     text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now(),
        applied_by text NOT NULL DEFAULT session_user
      )`);
    const applied = (await appliedMigrations(conn)) ?? [];
    refuseNewer(applied);
    const known = knownMigrations();
    for (const a of applied) {
      const k = known[a.version - 1];
      if (k && k.sha256 !== a.sha256) {
        throw new SchemaVersionError(
          `migration ${a.name} was changed after it was applied (sha256 ${a.sha256.slice(0, 12)} in the database, ${k.sha256.slice(0, 12)} here): migrations are add-only`,
        );
      }
    }
    const done: string[] = [];
    for (const m of known.slice(applied.length)) {
      await conn.query('INSERT INTO genfill.migrations (version, name, sha256) VALUES ($1, $2, $3)', [m.version, m.name, m.sha256]);
      try {
        await conn.query(m.sql);
      } catch (err) {
        throw new Error(`migration ${m.name} failed, nothing was applied: ${(err as Error).message}`, { cause: err });
      }
      done.push(m.name);
    }
    return { applied: done, version: known.length };
  });
}

/** Every command but `migrate` calls this first: the schema must be exactly what we know. */
export async function assertSchemaCurrent(db: Db): Promise<void> {
  const conn = await db.connect();
  try {
    const applied = await appliedMigrations(conn);
    if (applied === null || applied.length === 0) {
      throw new SchemaVersionError('the genfill registry is not installed in this database: run `genfill migrate` first');
    }
    refuseNewer(applied);
    if (applied.length < LATEST_VERSION) {
      throw new SchemaVersionError(
        `the database schema is at version ${applied.length}, this genfill needs ${LATEST_VERSION}: run \`genfill migrate\``,
      );
    }
  } finally {
    conn.release();
  }
}
