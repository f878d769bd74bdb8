// Run the genfill CLI in-process against a test database, capturing output and exit code.
import { main } from '@genfill/cli';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export async function runCli(args: string[], env: Record<string, string | undefined>): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    out: (t) => (stdout += t.endsWith('\n') ? t : `${t}\n`),
    err: (t) => (stderr += t.endsWith('\n') ? t : `${t}\n`),
    env: { ...env },
    tty: false,
  });
  return { code, stdout, stderr };
}
