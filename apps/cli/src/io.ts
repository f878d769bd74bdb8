// The CLI's user-facing output goes through this, so tests run commands in-process.
export interface Io {
  out(text: string): void;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
  /** True when stdout is a terminal (progress bars, colours). */
  tty: boolean;
}

export const processIo: Io = {
  out: (t) => process.stdout.write(t.endsWith('\n') ? t : `${t}\n`),
  err: (t) => process.stderr.write(t.endsWith('\n') ? t : `${t}\n`),
  env: process.env,
  tty: Boolean(process.stdout.isTTY),
};

export function json(io: Io, value: unknown): void {
  io.out(JSON.stringify(value, null, 2));
}
