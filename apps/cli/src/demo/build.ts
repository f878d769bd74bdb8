// The demo's build: two `genfill worker` processes, as an operator would run two replicas,
// watched through the registry until the release is BUILT.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type Db, ProgressMeter, progressLine, releaseProgress } from '@genfill/registry';

const BIN = fileURLToPath(new URL('../../bin/genfill.js', import.meta.url));

function exited(child: ChildProcess): Promise<number | null> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve(child.exitCode)
    : new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

export interface DemoBuild {
  workers: number;
  seconds: number;
  state: string;
  failed: number;
}

export async function buildWithWorkers(
  db: Db,
  o: { release: string; workers: number; throttle: boolean; env: NodeJS.ProcessEnv; say: (line: string) => void },
): Promise<DemoBuild> {
  const started = performance.now();
  const children = Array.from({ length: o.workers }, () =>
    spawn(process.execPath, [BIN, 'worker', '--release', o.release, ...(o.throttle ? [] : ['--no-throttle'])], {
      env: { ...process.env, ...o.env, GENFILL_LOG_LEVEL: o.env.GENFILL_LOG_LEVEL ?? 'warn' },
      stdio: ['ignore', 'ignore', 'inherit'],
    }),
  );
  const meter = new ProgressMeter();
  let lastLine = 0;
  try {
    for (;;) {
      const sample = await releaseProgress(db, o.release);
      const rates = meter.add(sample);
      if (sample.state !== 'BUILDING' || (sample.failed > 0 && sample.running === 0 && sample.pending === 0)) {
        o.say(progressLine(sample, rates));
        return { workers: o.workers, seconds: (performance.now() - started) / 1000, state: sample.state, failed: sample.failed };
      }
      if (Date.now() - lastLine >= 2000) {
        o.say(progressLine(sample, rates));
        lastLine = Date.now();
      }
      const dead = children.find((c) => c.exitCode !== null);
      if (dead) throw new Error(`a demo worker exited with code ${dead.exitCode} before the build finished`);
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(children.map(exited));
  }
}
