// A real streaming replica of the machine's PostgreSQL for throttle tests: pg_basebackup as
// the postgres user into a temporary directory, started on a free port with the cluster's
// own hba/ident files, stopped and removed after the test file. Replay can be frozen
// (pg_wal_replay_pause) to make replica lag real.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync, chownSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface Replica {
  port: number;
  /** A postgres:// URL of the replica for a database name (the admin URL's by default). */
  url(database?: string): string;
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Bytes received but not replayed yet. */
  replayBacklog(): Promise<number>;
  stop(): void;
}

function bindir(): string {
  return execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

/** What the primary must allow for a replica; a message naming the missing setting, or null. */
export async function replicationProblem(): Promise<string | null> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    const { rows } = await c.query<{ wal_level: string; senders: number; hba: number }>(
      `SELECT current_setting('wal_level') AS wal_level, current_setting('max_wal_senders')::int AS senders,
              (SELECT count(*) FROM pg_hba_file_rules
                WHERE 'replication' = ANY(database) AND (address IS NULL OR address = '127.0.0.1' OR type = 'local') AND error IS NULL)::int AS hba`,
    );
    const r = rows[0]!;
    if (r.wal_level === 'minimal') return 'wal_level is minimal: set wal_level = replica';
    if (r.senders < 1) return 'max_wal_senders is 0';
    if (r.hba < 1) return "pg_hba.conf has no replication line: add 'host replication all 127.0.0.1/32 trust' and reload";
    return null;
  } finally {
    await c.end();
  }
}

export async function startReplica(): Promise<Replica> {
  const problem = await replicationProblem();
  if (problem) throw new Error(`the machine's PostgreSQL cannot stream to a replica: ${problem}`);
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const { rows } = await admin.query<{ hba: string; ident: string }>(`SELECT current_setting('hba_file') AS hba, current_setting('ident_file') AS ident`);
  await admin.end();
  const bin = bindir();
  const root = mkdtempSync(join(tmpdir(), 'genfill-replica-'));
  const dir = join(root, 'data');
  const sock = join(root, 'sock');
  execFileSync('mkdir', ['-p', dir, sock]);
  const pgUser = statSync(rows[0]!.hba);
  for (const p of [root, dir, sock]) chownSync(p, pgUser.uid, pgUser.gid);
  const asPostgres = (cmd: string, args: string[]) =>
    execFileSync('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
  const port = await freePort();
  const u = new URL(ADMIN_URL);
  asPostgres('pg_basebackup', ['-h', u.hostname, '-p', u.port || '5432', '-U', 'postgres', '-D', dir, '-R', '-X', 'stream', '--checkpoint=fast', '--no-sync', '--no-manifest']);
  chmodSync(dir, 0o700);
  const conf = join(dir, 'postgresql.conf');
  writeFileSync(
    conf,
    [
      `port = ${port}`,
      `listen_addresses = '127.0.0.1'`,
      `unix_socket_directories = '${sock}'`,
      `hba_file = '${rows[0]!.hba}'`,
      `ident_file = '${rows[0]!.ident}'`,
      'hot_standby = on',
      // max_connections and the like must be at least the primary's, so they come from it.
      'fsync = off',
      `include_if_exists = 'postgresql.auto.conf'`,
      '',
    ].join('\n'),
  );
  chownSync(conf, pgUser.uid, pgUser.gid);
  try {
    asPostgres('pg_ctl', ['-D', dir, '-l', join(root, 'replica.log'), '-w', '-t', '60', 'start']);
  } catch (err) {
    const log = execFileSync('tail', ['-n', '20', join(root, 'replica.log')], { encoding: 'utf8' });
    rmSync(root, { recursive: true, force: true });
    throw new Error(`the replica did not start:\n${log}`, { cause: err });
  }

  const url = (database?: string) => {
    const r = new URL(ADMIN_URL);
    r.hostname = '127.0.0.1';
    r.port = String(port);
    if (database) r.pathname = `/${database}`;
    return r.toString();
  };
  const one = async <T>(sql: string): Promise<T> => {
    const c = new pg.Client({ connectionString: url() });
    await c.connect();
    try {
      return (await c.query(sql)).rows[0] as T;
    } finally {
      await c.end();
    }
  };
  let stopped = false;
  return {
    port,
    url,
    pauseReplay: async () => void (await one('SELECT pg_wal_replay_pause()')),
    resumeReplay: async () => void (await one('SELECT pg_wal_replay_resume()')),
    replayBacklog: async () =>
      Number((await one<{ b: string }>('SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::text AS b')).b),
    stop() {
      if (stopped) return;
      stopped = true;
      try {
        asPostgres('pg_ctl', ['-D', dir, '-m', 'immediate', '-w', 'stop']);
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    },
  };
}
