// The demo's API: `genfill api` as its own process under the plain genfill_api login the demo
// made (logins.ts), as a deployment runs it, asked for the release's status with a viewer token
// made for this run. It answers from the registry as that login: the status a person sees is
// the API's view, not the demo's superuser's.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

const BIN = fileURLToPath(new URL('../../bin/genfill.js', import.meta.url));
const START_MS = 30_000;

export interface DemoApi {
  url: string;
  /** GET `path` with the run's viewer token; the parsed JSON body and the status. */
  get(path: string): Promise<{ status: number; body: unknown }>;
  stop(): Promise<void>;
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((resolve) => child.once('exit', () => resolve()));
}

export async function startDemoApi(o: { env: NodeJS.ProcessEnv; databaseUrl: string }): Promise<DemoApi> {
  const token = randomBytes(24).toString('base64url');
  const child = spawn(process.execPath, [BIN, 'api', '--port', '0'], {
    env: {
      ...process.env,
      ...o.env,
      DATABASE_URL: o.databaseUrl,
      GENFILL_API_TOKENS: `demo-viewer:viewer:${token}`,
      GENFILL_LOG_LEVEL: o.env.GENFILL_LOG_LEVEL ?? 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err = (err + String(d)).slice(-4000)));
  const stop = async () => {
    child.kill('SIGTERM');
    await exited(child);
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the demo's API did not start within ${START_MS / 1000} s: ${err}`)), START_MS);
      child.stdout!.on('data', (d) => {
        out += String(d);
        const m = /listening on (http:\/\/\S+?)(?: |$)/m.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!.replace('localhost', '127.0.0.1'));
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the demo's API exited with code ${code} before it listened: ${err}`));
      });
    });
    return {
      url,
      stop,
      async get(path) {
        const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${token}`, accept: 'application/json' } });
        return { status: res.status, body: (await res.json()) as unknown };
      },
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
