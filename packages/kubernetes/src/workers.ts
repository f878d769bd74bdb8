// The worker Deployment and its KEDA ScaledObject, in one place for both shapes the fleet runs:
// the generic worker of deploy/base (every open release, GENFILL_RELEASE unset) and the
// per-release workers `genfill deploy render <release>` prints (GENFILL_RELEASE pinned,
// maxReplicaCount = the release's budget.workers). A test keeps deploy/base/worker.yaml equal
// to genericWorkers(), so the two cannot drift apart.
import { createHash } from 'node:crypto';
import { claimablePartitionsQuery } from './scaler.ts';

/** Every service's metrics port: /metrics, /healthz, /readyz (GENFILL_METRICS_PORT). */
export const METRICS_PORT = 9464;
/** The worker's BullMQ lock and registry lease (`--lock-duration`). */
export const WORKER_LOCK_DURATION_MS = 60_000;
/** The workers' statement_timeout: the longest a build statement may run. */
export const WORKER_STATEMENT_TIMEOUT = '5min';
export const WORKER_STATEMENT_TIMEOUT_SECONDS = 300;
/**
 * SIGTERM → SIGKILL: a build in flight may need a whole statement timeout after a lock
 * renewal just missed, plus the commit — lock duration + statement timeout + a margin.
 */
export const WORKER_GRACE_SECONDS = WORKER_LOCK_DURATION_MS / 1000 + WORKER_STATEMENT_TIMEOUT_SECONDS + 30;
/** The image name deploy/base uses; an overlay's `images:` (or --image) says which build. */
export const DEFAULT_IMAGE = 'genfill';
/** The generic worker's replica bound (an overlay patches it to the fleet's size). */
export const GENERIC_MAX_WORKERS = 8;
/** The KEDA TriggerAuthentication of deploy/base: the scaler's registry login from the Secret. */
export const SCALER_AUTH = 'genfill-registry';
/** The annotation naming the release a per-release worker serves (label values cannot hold `@`). */
export const RELEASE_ANNOTATION = 'genfill/release';

export type KubeObject = Record<string, unknown> & { apiVersion: string; kind: string; metadata: { name: string; [k: string]: unknown } };

/**
 * A DNS-1123 name for a release's workers, unique per release id: the id lower-cased with
 * every other character as `-`, cut to fit 63 characters, and a hash of the exact id (two
 * ids differing in case or in `@` versus `-` get different names).
 */
export function workerName(release?: string): string {
  if (release === undefined) return 'genfill-worker';
  const slug = release.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 38).replace(/-+$/, '');
  const hash = createHash('sha256').update(release).digest('hex').slice(0, 8);
  return `genfill-worker-${slug}-${hash}`;
}

function labels(name: string): Record<string, string> {
  return {
    'app.kubernetes.io/name': 'genfill',
    'app.kubernetes.io/part-of': 'genfill',
    'app.kubernetes.io/component': 'worker',
    'app.kubernetes.io/instance': name,
  };
}

export interface WorkerOptions {
  /** Pin the workers to one release (GENFILL_RELEASE); omitted: the generic worker of every open release. */
  release?: string;
  /** maxReplicaCount: the release's budget.workers, or the generic bound. */
  maxReplicas: number;
  image?: string;
  namespace?: string;
}

/** The Secret holding each service's DATABASE_URL (deploy/base; the overlay provides it). */
export const DB_SECRET = 'genfill-db';

function workerDeployment(o: WorkerOptions): KubeObject {
  const name = workerName(o.release);
  // The worker connects as a plain genfill_service login of its own (Secret genfill-db): never
  // a superuser, never the owner (README "Logins and persons").
  const env: ({ name: string; value: string } | { name: string; valueFrom: { secretKeyRef: { name: string; key: string } } })[] = [
    { name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: DB_SECRET, key: 'WORKER_DATABASE_URL' } } },
    { name: 'GENFILL_STATEMENT_TIMEOUT', value: WORKER_STATEMENT_TIMEOUT },
  ];
  if (o.release !== undefined) env.push({ name: 'GENFILL_RELEASE', value: o.release });
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: {
      name,
      ...(o.namespace ? { namespace: o.namespace } : {}),
      labels: labels(name),
      ...(o.release !== undefined ? { annotations: { [RELEASE_ANNOTATION]: o.release } } : {}),
    },
    spec: {
      // No replicas: the ScaledObject owns the count (an apply would otherwise reset it).
      selector: { matchLabels: labels(name) },
      template: {
        metadata: { labels: labels(name), annotations: { 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(METRICS_PORT) } },
        spec: {
          serviceAccountName: 'genfill',
          automountServiceAccountToken: false,
          terminationGracePeriodSeconds: WORKER_GRACE_SECONDS,
          securityContext: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } },
          containers: [
            {
              name: 'worker',
              image: o.image ?? DEFAULT_IMAGE,
              args: ['worker', '--lock-duration', String(WORKER_LOCK_DURATION_MS)],
              envFrom: [{ configMapRef: { name: 'genfill' } }, { secretRef: { name: 'genfill' } }],
              env,
              ports: [{ name: 'metrics', containerPort: METRICS_PORT }],
              readinessProbe: { httpGet: { path: '/readyz', port: 'metrics' }, periodSeconds: 10, timeoutSeconds: 5, failureThreshold: 3 },
              livenessProbe: { httpGet: { path: '/healthz', port: 'metrics' }, initialDelaySeconds: 20, periodSeconds: 20, timeoutSeconds: 5, failureThreshold: 3 },
              resources: { requests: { cpu: '250m', memory: '256Mi' }, limits: { cpu: '1', memory: '512Mi' } },
              securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
            },
          ],
        },
      },
    },
  };
}

function workerScaledObject(o: WorkerOptions): KubeObject {
  const name = workerName(o.release);
  return {
    apiVersion: 'keda.sh/v1alpha1',
    kind: 'ScaledObject',
    metadata: {
      name,
      ...(o.namespace ? { namespace: o.namespace } : {}),
      labels: labels(name),
      ...(o.release !== undefined ? { annotations: { [RELEASE_ANNOTATION]: o.release } } : {}),
    },
    spec: {
      scaleTargetRef: { name },
      minReplicaCount: 0,
      maxReplicaCount: o.maxReplicas,
      pollingInterval: 15,
      // Scale-in waits: a partition finishing is not the release finishing.
      cooldownPeriod: 120,
      triggers: [
        {
          type: 'postgresql',
          metadata: {
            query: claimablePartitionsQuery(o.release),
            // One partition per worker (the worker's --concurrency is 1); the throttle caps the
            // fleet's real concurrency below that when the database needs it.
            targetQueryValue: '1',
            activationTargetQueryValue: '0',
          },
          authenticationRef: { name: SCALER_AUTH },
        },
      ],
    },
  };
}

/** deploy/base's worker: every open release, up to GENERIC_MAX_WORKERS replicas. */
export function genericWorkers(o: { image?: string; namespace?: string } = {}): KubeObject[] {
  const opts = { ...o, maxReplicas: GENERIC_MAX_WORKERS };
  return [workerDeployment(opts), workerScaledObject(opts)];
}

/** `genfill deploy render`: the workers of one release, scaled 0…budget.workers. */
export function releaseWorkers(o: { release: string; workers: number; image?: string; namespace?: string }): KubeObject[] {
  const opts = { release: o.release, maxReplicas: o.workers, image: o.image, namespace: o.namespace };
  return [workerDeployment(opts), workerScaledObject(opts)];
}
