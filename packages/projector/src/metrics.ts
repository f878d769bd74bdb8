// The projector's metrics. `dataset` labels are bounded by the datasets a fleet serves.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export interface ProjectorMetrics {
  batch(dataset: string, events: number, applied: number, seconds: number): void;
  fenced(dataset: string): void;
  lag(dataset: string, events: number, seconds: number): void;
  stopped(dataset: string, stopped: boolean): void;
  holding(dataset: string, held: boolean): void;
  sealHeld(dataset: string, seconds: number): void;
  sourceRewritten(dataset: string, pending: boolean): void;
}

export function projectorMetrics(registry: Registry): ProjectorMetrics {
  const registers = [registry];
  const batches = new Histogram({
    name: 'genfill_projector_batch_events',
    help: 'Events (latest per key) one projector batch consumed',
    labelNames: ['dataset'] as const,
    buckets: [0, 1, 10, 100, 1000, 5000, 10000, 50000, 100000],
    registers,
  });
  const seconds = new Histogram({
    name: 'genfill_projector_batch_seconds',
    help: 'Seconds one projector batch took, from its snapshot to its commit',
    labelNames: ['dataset'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const applied = new Counter({
    name: 'genfill_projector_events_applied_total',
    help: 'Events the projector applied to the active generation (upserts and tombstones; no-ops excluded)',
    labelNames: ['dataset'] as const,
    registers,
  });
  const consumed = new Counter({
    name: 'genfill_projector_events_consumed_total',
    help: 'Events (latest per key) the projector consumed, no-ops included',
    labelNames: ['dataset'] as const,
    registers,
  });
  const fencedTotal = new Counter({
    name: 'genfill_projector_batches_fenced_total',
    help: 'Batches that wrote nothing because the seal, a cutover or a takeover fenced them',
    labelNames: ['dataset'] as const,
    registers,
  });
  const lagEvents = new Gauge({
    name: 'genfill_projector_lag_events',
    help: 'Events of the dataset source not yet in the projector frontier (counted up to 100000)',
    labelNames: ['dataset'] as const,
    registers,
  });
  const lagSeconds = new Gauge({
    name: 'genfill_projector_lag_seconds',
    help: 'Age of the oldest event not yet in the projector frontier (0 when none is waiting)',
    labelNames: ['dataset'] as const,
    registers,
  });
  const stoppedGauge = new Gauge({
    name: 'genfill_projector_stopped',
    help: '1 while a poison event stops the projector of the dataset (genfill quarantine names the way out)',
    labelNames: ['dataset'] as const,
    registers,
  });
  const holdingGauge = new Gauge({
    name: 'genfill_projector_lease_held',
    help: '1 while this process holds the dataset projector lease',
    labelNames: ['dataset'] as const,
    registers,
  });
  const sealGauge = new Gauge({
    name: 'genfill_seal_held_seconds',
    help: 'Seconds the current seal of the dataset has been held (0 while ingress is open)',
    labelNames: ['dataset'] as const,
    registers,
  });
  const rewrittenGauge = new Gauge({
    name: 'genfill_dataset_source_rewritten',
    help: '1 while the dataset source changed without DML (a table rewrite, an enum label renamed) and no drift check has verified the active generation since: cutovers are refused',
    labelNames: ['dataset'] as const,
    registers,
  });
  return {
    batch: (dataset, events, n, s) => {
      batches.observe({ dataset }, events);
      seconds.observe({ dataset }, s);
      consumed.inc({ dataset }, events);
      applied.inc({ dataset }, n);
    },
    fenced: (dataset) => fencedTotal.inc({ dataset }),
    lag: (dataset, events, s) => {
      lagEvents.set({ dataset }, events);
      lagSeconds.set({ dataset }, s);
    },
    stopped: (dataset, stopped) => stoppedGauge.set({ dataset }, stopped ? 1 : 0),
    holding: (dataset, held) => holdingGauge.set({ dataset }, held ? 1 : 0),
    sealHeld: (dataset, s) => sealGauge.set({ dataset }, s),
    sourceRewritten: (dataset, pending) => rewrittenGauge.set({ dataset }, pending ? 1 : 0),
  };
}
