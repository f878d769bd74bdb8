// deploy/ (kustomize), the Dockerfile and the compose fleet, checked without a cluster or a
// Docker engine: every manifest and every build validated against the Kubernetes, KEDA and
// Prometheus Operator schemas, the policy of every workload (probes, requests and limits,
// non-root and read-only, the worker's grace period, PDB only where replicas > 1, never a
// generic and a per-release worker for one release), the alerts through promtool, and the
// generated files equal to what their generators print today.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { genericWorkers, releaseWorkers } from '@genfill/kubernetes';
import { build, readDocuments, type Obj } from './support/kustomize.ts';
import { checkInstallation, validate } from './support/manifests.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');
const BASE = join(DEPLOY, 'base');
const EXAMPLE = join(DEPLOY, 'overlays/example');

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

const manifests = files(DEPLOY).filter((f) => /\.ya?ml$/.test(f) && !f.endsWith('kustomization.yaml'));
const sortKey = (o: Obj) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const sorted = (objects: Obj[]) => [...objects].sort((a, b) => sortKey(a).localeCompare(sortKey(b)));

/** Secret data as values, whatever base64 line wrapping the producer chose. */
function normalized(objects: Obj[]): Obj[] {
  return sorted(objects).map((o) =>
    o.kind === 'Secret' ? { ...o, data: Object.fromEntries(Object.entries(o.data as Record<string, string>).map(([k, v]) => [k, Buffer.from(v.replace(/\s/g, ''), 'base64').toString()])) } : o,
  );
}

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;

describe('deploy/', () => {
  it('holds only manifests that validate against the Kubernetes, KEDA and Prometheus Operator schemas', () => {
    expect(manifests.length).toBeGreaterThanOrEqual(9);
    for (const file of manifests) for (const o of readDocuments(file)) validate(o, relative(ROOT, file));
  });

  it('base: every service a Deployment started by its command, probed, limited, non-root and read-only; the generic worker on KEDA', () => {
    const objects = build(BASE);
    checkInstallation(objects);
    const kinds = objects.map((o) => o.kind);
    for (const k of ['ServiceAccount', 'ConfigMap', 'TriggerAuthentication', 'Service', 'PodDisruptionBudget', 'ScaledObject', 'PrometheusRule']) expect(kinds).toContain(k);
    const worker = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'genfill-worker')!;
    expect(worker.spec.template.spec.containers[0].env.map((e: Obj) => e.name)).not.toContain('GENFILL_RELEASE');
  });

  it('overlays/example: per-release workers instead of the generic one, the image, the namespace and the Secret', () => {
    const objects = build(EXAMPLE);
    checkInstallation(objects);
    const workers = objects.filter((o) => o.kind === 'Deployment' && o.spec.template.spec.containers[0].args[0] === 'worker');
    expect(workers.map((w) => w.metadata.annotations?.['genfill/release'])).toEqual(['order-tax-fix@3']);
    for (const o of objects.filter((x) => x.kind !== 'Namespace')) expect(o.metadata.namespace, sortKey(o)).toBe('genfill');
    for (const d of objects.filter((o) => o.kind === 'Deployment')) expect(d.spec.template.spec.containers[0].image).toBe('registry.example.com/data-platform/genfill:0.1.0');
    const secret = objects.find((o) => o.kind === 'Secret' && o.metadata.name === 'genfill')!;
    expect(Object.keys(secret.data).sort()).toEqual(['GENFILL_API_TOKENS', 'REDIS_URL', 'SCALER_DATABASE_URL']);
    // Each service's own login, and the reconciler's one owner connection (checkWorkload checks who reads which).
    const logins = objects.find((o) => o.kind === 'Secret' && o.metadata.name === 'genfill-db')!;
    expect(Object.keys(logins.data).sort()).toEqual([
      'API_DATABASE_URL', 'OWNER_DATABASE_URL', 'PLANNER_DATABASE_URL', 'PROJECTOR_DATABASE_URL', 'RECONCILER_DATABASE_URL', 'WORKER_DATABASE_URL',
    ]);
    const users = Object.values(logins.data as Record<string, string>).map((v) => new URL(Buffer.from(v, 'base64').toString()).username);
    expect(new Set(users).size, 'one login per service').toBe(users.length);
    const auth = objects.find((o) => o.kind === 'TriggerAuthentication')!;
    expect(auth.spec.secretTargetRef).toEqual([{ parameter: 'connection', name: secret.metadata.name, key: 'SCALER_DATABASE_URL' }]);
    // The Pod Security Standard the namespace enforces is the one the policy above checks.
    expect(objects.find((o) => o.kind === 'Namespace')!.metadata.labels['pod-security.kubernetes.io/enforce']).toBe('restricted');
  });

  it.runIf(kubectl)('builds as `kubectl kustomize` builds it (where kubectl is installed)', () => {
    for (const dir of [BASE, EXAMPLE]) {
      const out = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8' });
      expect(out.status, out.stderr).toBe(0);
      const theirs = out.stdout.split(/^---$/m).map((d) => parse(d)).filter(Boolean);
      expect(normalized(build(dir))).toEqual(normalized(theirs));
    }
  });

  it('keeps the generated workers equal to their generators: base = the generic worker, the example = `deploy render order-tax-fix@3`', () => {
    expect(readDocuments(join(BASE, 'worker.yaml'))).toEqual(genericWorkers());
    const spec = parse(readFileSync(join(ROOT, 'examples/order-tax-fix.yaml'), 'utf8'));
    expect(readDocuments(join(EXAMPLE, 'workers/order-tax-fix-3.yaml'))).toEqual(releaseWorkers({ release: spec.release, workers: spec.budget.workers }));
  });

  it('alerts on projector lag, a long seal, the log horizon, failed partitions, a release past its deadline, a drifted dataset and a failing drift check — promtool checks and fires each', () => {
    const rule = readDocuments(join(BASE, 'alerts.yaml'))[0]!;
    const dir = mkdtempSync(join(tmpdir(), 'genfill-alerts-'));
    writeFileSync(join(dir, 'rules.yaml'), stringify(rule.spec));
    const check = spawnSync('promtool', ['check', 'rules', join(dir, 'rules.yaml')], { encoding: 'utf8' });
    if ((check.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') throw new Error('promtool is not installed: apt-get install prometheus (.ci/run does)');
    expect(check.status, `${check.stdout}${check.stderr}`).toBe(0);

    const rules = rule.spec.groups.flatMap((g: Obj) => g.rules);
    const exprs = Object.fromEntries(rules.map((r: Obj) => [r.alert, String(r.expr)]));
    expect(exprs.GenfillProjectorLagging).toContain('genfill_projector_lag_seconds');
    expect(exprs.GenfillSealHeldTooLong).toContain('genfill_seal_held_seconds');
    expect(exprs.GenfillLogHorizonHeldBack).toContain('genfill_log_horizon_age_seconds');
    expect(exprs.GenfillPartitionsFailed).toMatch(/genfill_release_partitions\{status="FAILED"\}/);
    expect(exprs.GenfillReleasePastDeadline).toContain('genfill_release_deadline_timestamp_seconds');
    expect(exprs.GenfillDatasetDrifted).toContain('genfill_dataset_drift_rows');
    expect(exprs.GenfillDriftCheckFailing).toContain('genfill_dataset_drift_check_failing');

    // Each alert fires on series shaped as the services export them, and stays quiet below its threshold.
    // An hour of samples a minute apart; the alerts are evaluated at 45 minutes.
    const series = [
      ['genfill_projector_lag_seconds{dataset="orders",service="projector"}', '300x60', '5x60'],
      ['genfill_seal_held_seconds{dataset="orders",service="projector"}', '0+60x60', '0x60'],
      ['genfill_log_horizon_age_seconds{service="projector"}', '200000+60x60', '3600+60x60'],
      ['genfill_release_partitions{release="r@1",status="FAILED",service="api",pod="api-0"}', '2x60', '0x60'],
      ['genfill_release_deadline_timestamp_seconds{release="r@1",service="api",pod="api-0"}', '0x60', '1e12x60'],
      ['genfill_dataset_drift_rows{dataset="orders",service="reconciler"}', '2x60', '0x60'],
      ['genfill_dataset_drift_check_failing{dataset="orders",service="reconciler"}', '1x60', '0x60'],
    ];
    const expected = {
      GenfillProjectorLagging: { dataset: 'orders', severity: 'warning' },
      GenfillSealHeldTooLong: { dataset: 'orders', severity: 'critical' },
      GenfillLogHorizonHeldBack: { severity: 'warning' },
      GenfillPartitionsFailed: { release: 'r@1', severity: 'warning' },
      GenfillReleasePastDeadline: { release: 'r@1', severity: 'warning' },
      GenfillDatasetDrifted: { dataset: 'orders', severity: 'critical' },
      GenfillDriftCheckFailing: { dataset: 'orders', severity: 'warning' },
    };
    // Annotations are templates promtool checked above; the unit test compares labels only.
    const bare = { groups: rule.spec.groups.map((g: Obj) => ({ ...g, rules: g.rules.map(({ annotations: _a, ...r }: Obj) => r) })) };
    writeFileSync(join(dir, 'bare.yaml'), stringify(bare));
    const test = {
      rule_files: ['bare.yaml'],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: series.map(([s, firing]) => ({ series: s, values: firing })),
          alert_rule_test: Object.entries(expected).map(([alertname, labels]) => ({ eval_time: '45m', alertname, exp_alerts: [{ exp_labels: labels }] })),
        },
        {
          interval: '1m',
          input_series: series.map(([s, , quiet]) => ({ series: s, values: quiet })),
          alert_rule_test: Object.keys(expected).map((alertname) => ({ eval_time: '45m', alertname, exp_alerts: [] })),
        },
      ],
    };
    writeFileSync(join(dir, 'test.yaml'), stringify(test));
    const unit = spawnSync('promtool', ['test', 'rules', join(dir, 'test.yaml')], { encoding: 'utf8' });
    expect(unit.status, `${unit.stdout}${unit.stderr}`).toBe(0);
  });
});

describe('the image', () => {
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  const stages = dockerfile.split(/^FROM /m).slice(1);
  const runtime = stages.at(-1)!;

  it('is built in stages with production dependencies only, and runs as a non-root user under an init', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(dockerfile).toMatch(/^RUN npm ci --omit=dev\b/m);
    expect(runtime).not.toMatch(/npm (ci|install)/);
    const user = /^USER (\S+)/m.exec(runtime)?.[1];
    expect(user).toBeDefined();
    expect(['root', '0', '0:0']).not.toContain(user);
    const entry = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(runtime)![1]!);
    expect(entry.slice(0, 2)).toEqual(['/usr/bin/tini', '--']);
    expect(entry.slice(2)).toEqual(['node', 'apps/cli/bin/genfill.js']);
    // Nothing is written at run time: tsx keeps its transform cache in memory.
    expect(runtime).toMatch(/TSX_DISABLE_CACHE=1/);
  });

  it('gets every source, migration and manifest it runs from the build context, and no tests, docs or node_modules', () => {
    const patterns = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    // Docker's patterns, as far as .dockerignore uses them: `**/` any directories, `*` within one.
    const toRegex = (p: string) =>
      new RegExp(`^${p.split('**/').map((part) => part.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')).join('(.*/)?')}(/.*)?$`);
    const ignored = (path: string) => patterns.some((p) => toRegex(p).test(path));
    const needed = [
      'package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.base.json', 'apps/cli/bin/genfill.js', 'examples/order-tax-fix.yaml',
      ...['apps', 'packages'].flatMap((top) => files(join(ROOT, top)).map((f) => relative(ROOT, f)).filter((f) => /^[^/]+\/[^/]+\/(src\/|migrations\/|package\.json$|tsconfig\.json$)/.test(f) && !f.includes('node_modules'))),
    ];
    expect(needed.some((f) => f.startsWith('packages/registry/migrations/'))).toBe(true);
    expect(needed.filter(ignored)).toEqual([]);
    for (const f of ['node_modules/pg/package.json', 'packages/builder/node_modules/x', 'test/worker.test.ts', 'packages/builder/test/build.test.ts', '.git/HEAD', 'deploy/base/api.yaml', 'docs/design.md', 'bench/build.ts']) {
      expect(ignored(f), f).toBe(true);
    }
    for (const dir of ['apps', 'packages', 'examples']) expect(runtime).toMatch(new RegExp(`^COPY ${dir} \\./${dir}$`, 'm'));
  });
});
