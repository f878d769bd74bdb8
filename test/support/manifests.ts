// Kubernetes objects checked against the API's schemas (kubernetes-models; KEDA's and the
// Prometheus Operator's CRDs from @kubernetes-models/*), and the policy every genfill workload
// meets. Used on the files of deploy/, on kustomize builds of them and on `genfill deploy
// render` output alike.
import { ScaledObject, TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { expect } from 'vitest';
import { loadConfig } from '@genfill/contracts';
import type { Obj } from './kustomize.ts';

const MODELS: Record<string, new (data: any) => { validate(): void }> = {
  'apps/v1/Deployment': Deployment,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'v1/ConfigMap': ConfigMap,
  'v1/Namespace': Namespace,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication': TriggerAuthentication,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
};

/** Throws naming the object and the schema's complaint; an unknown kind is an error too. */
export function validate(o: Obj, where: string): void {
  const Model = MODELS[`${o.apiVersion}/${o.kind}`];
  if (!Model) throw new Error(`${where}: no schema for ${o.apiVersion} ${o.kind}: add its model to test/support/manifests.ts`);
  try {
    new Model(o).validate();
  } catch (err) {
    throw new Error(`${where}: ${o.kind}/${o.metadata?.name} is invalid: ${(err as Error).message}`, { cause: err });
  }
}

export const SERVICES = ['api', 'planner', 'worker', 'reconciler', 'projector'] as const;

/** Milliseconds of a genfill duration setting, parsed as the services parse it. */
export function statementTimeoutMs(value: string): number {
  return loadConfig({ GENFILL_STATEMENT_TIMEOUT: value }).GENFILL_STATEMENT_TIMEOUT!;
}

const env = (c: Obj, name: string): string | undefined => c.env?.find((e: Obj) => e.name === name)?.value;

/** Probes, requests and limits, non-root and read-only, configuration from the ConfigMap and the Secret, the drain's grace period. */
export function checkWorkload(d: Obj, config: Record<string, string>): void {
  const where = `Deployment/${d.metadata.name}`;
  const pod = d.spec.template.spec;
  expect(pod.automountServiceAccountToken, `${where}: no service account token`).toBe(false);
  expect(pod.securityContext, `${where}: pod securityContext`).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
  expect(pod.securityContext.runAsUser, `${where}: a non-root uid`).toBeGreaterThan(0);
  expect(pod.containers, `${where}: one container`).toHaveLength(1);
  const c = pod.containers[0];
  expect(SERVICES, `${where}: runs a genfill service verb`).toContain(c.args[0]);
  expect(c.securityContext, `${where}: container securityContext`).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
  for (const kind of ['requests', 'limits']) {
    expect(c.resources?.[kind], `${where}: ${kind}`).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
  }
  expect(c.envFrom, `${where}: configuration from the ConfigMap and the Secret`).toEqual([{ configMapRef: { name: 'genfill' } }, { secretRef: { name: 'genfill' } }]);
  // Each service as a plain login of its own (Secret genfill-db), the owner connection only for the reconciler.
  const fromSecret = (name: string) => c.env?.find((e: Obj) => e.name === name)?.valueFrom?.secretKeyRef;
  expect(fromSecret('DATABASE_URL'), `${where}: DATABASE_URL is its own login`).toEqual({ name: 'genfill-db', key: `${String(c.args[0]).toUpperCase()}_DATABASE_URL` });
  if (c.args[0] === 'reconciler') expect(fromSecret('GENFILL_OWNER_DATABASE_URL'), `${where}: the one owner connection`).toEqual({ name: 'genfill-db', key: 'OWNER_DATABASE_URL' });
  else expect(fromSecret('GENFILL_OWNER_DATABASE_URL'), `${where}: no owner connection`).toBeUndefined();
  const metrics = c.ports.find((p: Obj) => p.name === 'metrics');
  expect(metrics?.containerPort, `${where}: the metrics port is GENFILL_METRICS_PORT`).toBe(Number(config.GENFILL_METRICS_PORT));
  expect(c.readinessProbe?.httpGet, `${where}: readiness on /readyz`).toEqual({ path: '/readyz', port: 'metrics' });
  expect(c.livenessProbe?.httpGet, `${where}: liveness on /healthz`).toEqual({ path: '/healthz', port: 'metrics' });
  expect(pod.terminationGracePeriodSeconds, `${where}: a grace period`).toBeGreaterThan(0);
  if (c.args[0] === 'worker') {
    const lockMs = Number(c.args[c.args.indexOf('--lock-duration') + 1]);
    const timeout = env(c, 'GENFILL_STATEMENT_TIMEOUT') ?? config.GENFILL_STATEMENT_TIMEOUT;
    expect(lockMs, `${where}: --lock-duration`).toBeGreaterThan(0);
    expect(timeout, `${where}: GENFILL_STATEMENT_TIMEOUT bounds a build`).toBeDefined();
    expect(pod.terminationGracePeriodSeconds * 1000, `${where}: grace > lock duration + statement timeout`).toBeGreaterThan(lockMs + statementTimeoutMs(timeout!));
    // KEDA owns the replica count.
    expect(d.spec.replicas, `${where}: no replicas under a ScaledObject`).toBeUndefined();
  }
}

/** The release a worker Deployment serves (GENFILL_RELEASE), or null for the generic worker. */
export function servedRelease(d: Obj): string | null {
  return env(d.spec.template.spec.containers[0], 'GENFILL_RELEASE') ?? null;
}

function selects(selector: Record<string, string>, labels: Record<string, string>): boolean {
  return Object.entries(selector).every(([k, v]) => labels?.[k] === v);
}

/** The policy of a whole installation (a kustomize build). */
export function checkInstallation(objects: Obj[]): void {
  for (const o of objects) validate(o, 'build');
  const of = (kind: string) => objects.filter((o) => o.kind === kind);
  const config = of('ConfigMap').find((c) => c.metadata.name === 'genfill')!.data as Record<string, string>;
  // The configuration parses as the services parse it.
  expect(() => loadConfig(config)).not.toThrow();
  const deployments = of('Deployment');
  for (const d of deployments) checkWorkload(d, config);
  // One Deployment per service (workers: one or more).
  const commands = deployments.map((d) => d.spec.template.spec.containers[0].args[0]);
  for (const s of SERVICES) expect(commands, `a Deployment runs \`genfill ${s}\``).toContain(s);
  for (const s of SERVICES.filter((x) => x !== 'worker')) expect(commands.filter((c) => c === s), `one Deployment of ${s}`).toHaveLength(1);

  // A PodDisruptionBudget exactly where a Deployment runs more than one replica.
  const pdbs = of('PodDisruptionBudget');
  for (const d of deployments) {
    const labels = d.spec.template.metadata.labels;
    const covering = pdbs.filter((p) => selects(p.spec.selector.matchLabels, labels));
    const scaled = of('ScaledObject').some((s) => s.spec.scaleTargetRef.name === d.metadata.name);
    if (!scaled && (d.spec.replicas ?? 1) > 1) expect(covering, `${d.metadata.name}: ${d.spec.replicas} replicas need a PDB`).toHaveLength(1);
    else expect(covering, `${d.metadata.name}: no PDB on a singleton or a KEDA-scaled Deployment (it would block node drains)`).toHaveLength(0);
  }
  for (const p of pdbs) expect(deployments.some((d) => selects(p.spec.selector.matchLabels, d.spec.template.metadata.labels)), `PDB ${p.metadata.name} selects a Deployment`).toBe(true);

  // Every ScaledObject scales an existing worker Deployment on the registry, through the TriggerAuthentication.
  const auths = new Set(of('TriggerAuthentication').map((t) => t.metadata.name));
  for (const s of of('ScaledObject')) {
    const target = deployments.find((d) => d.metadata.name === s.spec.scaleTargetRef.name);
    expect(target?.spec.template.spec.containers[0].args[0], `ScaledObject ${s.metadata.name} scales a worker`).toBe('worker');
    expect(s.spec.minReplicaCount).toBe(0);
    expect(s.spec.maxReplicaCount).toBeGreaterThanOrEqual(1);
    expect(s.spec.triggers.map((t: Obj) => t.type)).toEqual(['postgresql']);
    expect(auths.has(s.spec.triggers[0].authenticationRef.name), `ScaledObject ${s.metadata.name}: its TriggerAuthentication exists`).toBe(true);
  }
  for (const w of deployments.filter((d) => d.spec.template.spec.containers[0].args[0] === 'worker')) {
    expect(of('ScaledObject').some((s) => s.spec.scaleTargetRef.name === w.metadata.name), `${w.metadata.name} has a ScaledObject`).toBe(true);
  }

  // The generic worker and per-release workers are alternatives: never both for one release.
  const served = deployments.filter((d) => d.spec.template.spec.containers[0].args[0] === 'worker').map(servedRelease);
  if (served.includes(null)) expect(served, 'the generic worker serves every open release: no per-release worker beside it').toEqual([null]);
  expect(new Set(served).size, 'one worker Deployment per release').toBe(served.length);

  // The api Service reaches the api pods.
  const api = deployments.find((d) => d.metadata.name === 'genfill-api')!;
  const svc = of('Service').find((s) => s.metadata.name === 'genfill-api')!;
  expect(selects(svc.spec.selector, api.spec.template.metadata.labels)).toBe(true);
}
