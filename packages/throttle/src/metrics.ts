// The throttle's metrics on the process's prom-client registry (one per process; the worker
// passes its own). Labels are bounded: the release, the signal name, the action.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Decision } from './aimd.ts';

export interface ThrottleMetrics {
  /** `ratios`: each signal that had a value, divided by its budget. */
  decision(release: string, d: Decision, ratios: Record<string, number>, workerRowsPerSecond: number): void;
  fenced(release: string): void;
  leader(release: string, isLeader: boolean): void;
}

export function throttleMetrics(registry: Registry): ThrottleMetrics {
  const registers = [registry];
  const concurrency = new Gauge({ name: 'genfill_throttle_concurrency', help: 'BullMQ global concurrency the controller set for the release queue', labelNames: ['release'] as const, registers });
  const rate = new Gauge({ name: 'genfill_throttle_rows_per_second', help: 'Fleet admission rate the controller set (rows/s)', labelNames: ['release'] as const, registers });
  const share = new Gauge({ name: 'genfill_throttle_worker_rows_per_second', help: 'Admission rate per live worker (rows/s)', labelNames: ['release'] as const, registers });
  const paused = new Gauge({ name: 'genfill_throttle_paused', help: '1 while the controller holds throttle_paused', labelNames: ['release'] as const, registers });
  const ratio = new Gauge({ name: 'genfill_throttle_signal_ratio', help: 'Each signal divided by its budget (above 1: over budget)', labelNames: ['release', 'signal'] as const, registers });
  const decisions = new Counter({ name: 'genfill_throttle_decisions_total', help: 'Decisions recorded by action (increase, hold, decrease, pause, resume) and binding signal', labelNames: ['release', 'action', 'binding'] as const, registers });
  const fenced = new Counter({ name: 'genfill_throttle_fenced_total', help: 'Decisions refused by the Postgres fence: another controller had taken over', labelNames: ['release'] as const, registers });
  const leader = new Gauge({ name: 'genfill_throttle_leader', help: '1 while this process holds the release controller lease', labelNames: ['release'] as const, registers });
  return {
    decision(release, d, ratios, workerRowsPerSecond) {
      concurrency.set({ release }, d.concurrency);
      rate.set({ release }, d.rowsPerSecond);
      share.set({ release }, workerRowsPerSecond);
      paused.set({ release }, d.paused ? 1 : 0);
      decisions.inc({ release, action: d.action, binding: d.binding });
      for (const [signal, v] of Object.entries(ratios)) ratio.set({ release, signal }, v);
    },
    fenced: (release) => fenced.inc({ release }),
    leader: (release, isLeader) => leader.set({ release }, isLeader ? 1 : 0),
  };
}
