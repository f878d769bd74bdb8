// A three-node Redis Cluster on loopback for the tests that run genfill on one. .ci/run keeps
// one up on ports 30001–30003 and names it in GENFILL_TEST_REDIS_CLUSTER (like the main Redis,
// it stays up); without it, the test file starts its own three redis-server processes on free
// ports (each needs its port + 10000 free too, for the cluster bus), joins them with
// `redis-cli --cluster create`, and kills them and removes their directory after the file.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll } from 'vitest';
import { clusterTarget, createRedis, type Redis } from '@genfill/queue';
import { waitFor } from './wait.ts';

const run = promisify(execFile);

export interface TestCluster {
  /** redis+cluster://127.0.0.1:p1,…: pass as REDIS_URL. */
  url: string;
  ports: number[];
  /** True when this file started the nodes (and stops them after the file). */
  own: boolean;
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function clusterPorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  for (let tries = 0; ports.length < n && tries < 200; tries++) {
    const p = 20_000 + Math.floor(Math.random() * 9_000);
    if (!ports.includes(p) && (await portFree(p)) && (await portFree(p + 10_000))) ports.push(p);
  }
  if (ports.length < n) throw new Error('no free ports for a test Redis Cluster (each node needs port and port + 10000)');
  return ports;
}

async function clusterOk(port: number): Promise<boolean> {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'cluster', 'info']).catch(() => ({ stdout: '' }));
  return /cluster_state:ok/.test(stdout);
}

/** Call at the top level of a test file (it registers its own afterAll). */
export async function useRedisCluster(): Promise<TestCluster> {
  const given = process.env.GENFILL_TEST_REDIS_CLUSTER;
  if (given) {
    const target = clusterTarget(given);
    if (!target) throw new Error(`GENFILL_TEST_REDIS_CLUSTER is not a redis+cluster:// URL: ${given}`);
    const ports = target.nodes.map((n) => n.port);
    if (!(await clusterOk(ports[0]!))) throw new Error(`the Redis Cluster of GENFILL_TEST_REDIS_CLUSTER (${given}) is not answering with cluster_state:ok: run .ci/run's cluster setup`);
    return { url: given, ports, own: false };
  }
  const ports = await clusterPorts(3);
  const dir = mkdtempSync(join(tmpdir(), 'genfill-redis-cluster-'));
  const nodes: ChildProcess[] = [];
  afterAll(async () => {
    for (const node of nodes) if (node.exitCode === null && node.signalCode === null) node.kill('SIGKILL');
    await Promise.all(nodes.map((node) => (node.exitCode !== null || node.signalCode !== null ? null : new Promise((r) => node.once('exit', r)))));
    rmSync(dir, { recursive: true, force: true });
  });
  for (const port of ports) {
    const node = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`),
        '--dir', dir, '--save', '', '--appendonly', 'no', '--logfile', join(dir, `redis-${port}.log`)],
      { stdio: 'ignore' },
    );
    nodes.push(node);
  }
  for (const port of ports) {
    await waitFor(`redis-server on ${port}`, async () => (await run('redis-cli', ['-p', String(port), 'ping']).catch(() => ({ stdout: '' }))).stdout.includes('PONG'), 10_000);
  }
  await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes']);
  for (const port of ports) await waitFor(`cluster_state:ok on ${port}`, () => clusterOk(port), 15_000);
  return { url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, ports, own: true };
}

/** A client of the one node that serves `key`'s slot (a master), and that slot. */
export async function nodeOf(cluster: TestCluster, key: string): Promise<{ slot: number; port: number; node: Redis }> {
  const probe = createRedis(`redis://127.0.0.1:${cluster.ports[0]}`);
  try {
    const slot = Number(await probe.call('CLUSTER', 'KEYSLOT', key));
    const ranges = (await probe.call('CLUSTER', 'SLOTS')) as [number, number, [string, number, ...unknown[]], ...unknown[]][];
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    if (!range) throw new Error(`no node serves slot ${slot}`);
    const port = Number(range[2][1]);
    return { slot, port, node: createRedis(`redis://127.0.0.1:${port}`) };
  } finally {
    probe.disconnect();
  }
}
