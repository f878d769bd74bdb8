// What the benches share: a database of their own (created on first use), the CLI run in
// process against it, and waiting for a child process to exit.
import type { ChildProcess } from 'node:child_process';
import pg from 'pg';
import { main } from '@genfill/cli';

const LOCAL = 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * The bench's database: DATABASE_URL when it is set (the caller chose), otherwise `name` on
 * the local server, created when missing — or, with `fresh`, dropped and created again so no
 * earlier run's rows, bloat or triggers are left in it.
 */
export async function benchDatabase(name: string, opts: { fresh?: boolean } = {}): Promise<URL> {
  if (process.env.DATABASE_URL) return new URL(process.env.DATABASE_URL);
  const admin = new pg.Client({ connectionString: LOCAL });
  await admin.connect();
  try {
    const quoted = `"${name.replace(/"/g, '""')}"`;
    if (opts.fresh) await admin.query(`DROP DATABASE IF EXISTS ${quoted} WITH (FORCE)`);
    const exists = await admin.query(`SELECT 1 FROM pg_database WHERE datname = $1`, [name]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE ${quoted}`);
  } finally {
    await admin.end();
  }
  const url = new URL(LOCAL);
  url.pathname = `/${name}`;
  return url;
}

/** The environment the bench's CLI calls and worker processes run with. */
export function benchEnv(url: URL, queuePrefix: string): Record<string, string | undefined> {
  return { ...process.env, DATABASE_URL: url.toString(), GENFILL_QUEUE_PREFIX: queuePrefix, GENFILL_LOG_LEVEL: 'warn' };
}

/** `genfill <argv>` in process with `env`: its stdout, or an error with its stderr. */
export function cliRunner(env: Record<string, string | undefined>): (...argv: string[]) => Promise<string> {
  return async (...argv) => {
    let out = '';
    let err = '';
    const code = await main(argv, { out: (t) => (out += `${t}\n`), err: (t) => (err += `${t}\n`), env, tty: false });
    if (code !== 0) throw new Error(`genfill ${argv.join(' ')} exited ${code}: ${err}`);
    return out;
  };
}

export const exited = (c: ChildProcess): Promise<void> =>
  c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r()));
