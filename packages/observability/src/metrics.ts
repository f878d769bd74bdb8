// One prom-client registry per process. Names are genfill_<noun>_<unit>; labels are bounded
// (never a key or a partition id on a long-lived metric).
import { collectDefaultMetrics, Registry } from 'prom-client';

export function createMetricsRegistry(service: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry, prefix: 'genfill_process_' });
  return registry;
}
