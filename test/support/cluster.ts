// A throwaway PostgreSQL cluster for tests that need a server setting the machine's server
// does not have and cannot change without a restart (max_prepared_transactions): initdb as the
// postgres user into a temporary directory, started on a free port with trust authentication
// on 127.0.0.1 only, stopped and removed by stop(). About a second to start.
import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Cluster {
  port: number;
  /** A postgres:// URL for a database of the cluster (postgres by default). */
  url(database?: string): string;
  stop(): void;
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

export async function startCluster(settings: Record<string, string | number>): Promise<Cluster> {
  const bin = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
  const root = mkdtempSync(join(tmpdir(), 'genfill-cluster-'));
  const dir = join(root, 'data');
  // The server refuses to run as root: then the cluster belongs to the postgres user.
  const owner = process.getuid?.() === 0 ? 'postgres' : undefined;
  const asOwner = (cmd: string, args: string[]) =>
    owner
      ? execFileSync('runuser', ['-u', owner, '--', join(bin, cmd), ...args], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 })
      : execFileSync(join(bin, cmd), args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
  if (owner) {
    const uid = Number(execFileSync('id', ['-u', owner], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', owner], { encoding: 'utf8' }).trim());
    chownSync(root, uid, gid);
  }
  const port = await freePort();
  try {
    asOwner('initdb', ['-D', dir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync', '--no-instructions']);
    const conf = {
      port,
      listen_addresses: "'127.0.0.1'",
      unix_socket_directories: `'${root}'`,
      fsync: 'off',
      shared_buffers: "'32MB'",
      max_connections: 30,
      ...settings,
    };
    const lines = Object.entries(conf).map(([k, v]) => `${k} = ${v}`);
    writeFileSync(join(dir, 'postgresql.auto.conf'), `${lines.join('\n')}\n`);
    asOwner('pg_ctl', ['-D', dir, '-l', join(root, 'server.log'), '-w', '-t', '60', 'start']);
  } catch (err) {
    let log = '';
    try {
      log = execFileSync('tail', ['-n', '20', join(root, 'server.log')], { encoding: 'utf8' });
    } catch {
      // no log yet: initdb failed
    }
    rmSync(root, { recursive: true, force: true });
    throw new Error(`the test cluster did not start: ${(err as Error).message}\n${log}`, { cause: err });
  }
  let stopped = false;
  return {
    port,
    url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`,
    stop() {
      if (stopped) return;
      stopped = true;
      try {
        asOwner('pg_ctl', ['-D', dir, '-m', 'immediate', '-w', 'stop']);
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    },
  };
}
