// `genfill deploy render <release>`: the worker Deployment pinned to one release
// (GENFILL_RELEASE) and its KEDA ScaledObject (0…budget.workers replicas on the count of the
// release's claimable partitions), as YAML for `kubectl apply -f -` or an overlay's resources.
// It uses the TriggerAuthentication, ConfigMap and Secret of deploy/base in the same namespace.
// Per-release workers replace the base's generic worker (components/per-release-workers):
// never both for one release.
import { InvalidArgumentError, type Command } from 'commander';
import { DEFAULT_IMAGE, releaseWorkers, toYamlDocuments } from '@genfill/kubernetes';
import { getRelease, withTransaction } from '@genfill/registry';
import type { Context } from '../context.ts';

function dnsLabel(value: string): string {
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(value)) throw new InvalidArgumentError('expected a Kubernetes namespace name (lower-case letters, digits and -, at most 63)');
  return value;
}

function imageRef(value: string): string {
  if (!/^[^\s]+$/.test(value)) throw new InvalidArgumentError('expected an image reference without spaces, e.g. registry.example.com/genfill:0.1.0');
  return value;
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  const deploy = program.command('deploy').description('Kubernetes manifests for the fleet (deploy/ holds the kustomize base and overlays)');

  deploy
    .command('render <release>')
    .description(
      "print a worker Deployment pinned to the release and its KEDA ScaledObject (maxReplicaCount = the release's budget.workers), " +
        'ready for `kubectl apply -f -` beside deploy/base with the per-release-workers component',
    )
    .option('--image <ref>', 'the genfill image to run', imageRef, DEFAULT_IMAGE)
    .option('--namespace <ns>', 'set metadata.namespace (otherwise kubectl or kustomize decides)', dnsLabel)
    .action((release: string, opts: { image: string; namespace?: string }) =>
      run(async (ctx) => {
        const db = await ctx.db();
        const row = await withTransaction(db, (conn) => getRelease(conn, release));
        if (row.state !== 'SNAPSHOT_PINNED' && row.state !== 'BUILDING' && row.state !== 'DRAFT') {
          ctx.io.err(`warning: release ${release} is ${row.state}: its workers find nothing to claim and stay at zero replicas`);
        }
        ctx.io.out(toYamlDocuments(releaseWorkers({ release: row.id, workers: row.spec.budget.workers, image: opts.image, namespace: opts.namespace })));
      }),
    );
}
