// A service's command-line flags, declared once. The service's own entry point
// (`node apps/<role>/src/main.ts …`) and the CLI verb (`genfill <role> …`) hand their arguments
// to the same parser, so the two can never accept different flags; --help is written from the
// same declarations.
import { parseArgs } from 'node:util';
import { bareNumberMeans, DURATION_GRAMMAR, type DurationBounds, durationLiteral, type DurationUnit, InvalidInputError, parseDuration, type Problem } from '@genfill/contracts';

export interface Flag<T> {
  type: 'string' | 'boolean';
  help: string;
  /** The value's name in --help: `--interval <duration>`. */
  placeholder?: string;
  /** Booleans only: the flag is on by default and `--no-<name>` turns it off. */
  negatable?: boolean;
  /** The default as --help shows it. */
  shownDefault?: string;
  /** The raw value (undefined when absent) to the parsed one; throws an Error saying why not. */
  parse(raw: string | boolean | undefined): T;
}

export type FlagSpecs = Record<string, Flag<unknown>>;
export type FlagValues<F extends FlagSpecs> = { [K in keyof F]: F[K] extends Flag<infer T> ? T : never };

function positiveInteger(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !(n > 0)) throw new Error(`expected a positive integer, got ${raw}`);
  return n;
}

export const flag = {
  /** A positive whole number with a default. */
  count: (help: string, fallback: number, placeholder = 'n'): Flag<number> => ({
    type: 'string',
    help,
    placeholder,
    shownDefault: String(fallback),
    parse: (raw) => (raw === undefined ? fallback : positiveInteger(String(raw))),
  }),
  /**
   * A duration in the one grammar (`500ms`, `30s`, `2m`), in milliseconds, longer than 0 unless
   * `bounds` say otherwise; a bare number is `bareUnit`, the unit the flag has always taken.
   */
  duration: (help: string, fallbackMs: number, bareUnit: DurationUnit, bounds: DurationBounds = { exclusiveMin: true }): Flag<number> => ({
    type: 'string',
    help: `${help} (${bareNumberMeans(bareUnit)})`,
    placeholder: 'duration',
    shownDefault: durationLiteral(fallbackMs),
    parse: (raw) => (raw === undefined ? fallbackMs : parseDuration(String(raw), bareUnit, bounds)),
  }),
  /** A TCP port; 0 picks a free one. Absent: undefined. */
  port: (help: string): Flag<number | undefined> => ({
    type: 'string',
    help,
    placeholder: 'n',
    parse: (raw) => {
      if (raw === undefined) return undefined;
      const s = String(raw);
      if (!/^\d+$/.test(s) || Number(s) > 65535) throw new Error(`expected a port number (0 picks a free one), got ${s}`);
      return Number(s);
    },
  }),
  /** A comma-separated list; absent: undefined. */
  list: (help: string, placeholder: string): Flag<string[] | undefined> => ({
    type: 'string',
    help,
    placeholder,
    parse: (raw) => {
      if (raw === undefined) return undefined;
      const items = String(raw).split(',').map((s) => s.trim()).filter(Boolean);
      if (items.length === 0) throw new Error('expected at least one entry');
      return items;
    },
  }),
  /** Off unless given. */
  boolean: (help: string): Flag<boolean> => ({ type: 'boolean', help, parse: (raw) => raw === true }),
  /** On unless `--no-<name>` is given. */
  enabled: (help: string): Flag<boolean> => ({ type: 'boolean', help, negatable: true, parse: (raw) => raw !== false }),
};

export const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

export type Parsed<F extends FlagSpecs> = { help: true } | { help: false; values: FlagValues<F> };

/** Parse `argv` strictly: an unknown flag, a stray argument or a bad value is InvalidInputError (exit 2). */
export function parseFlags<F extends FlagSpecs>(specs: F, argv: string[]): Parsed<F> {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = { help: { type: 'boolean', short: 'h' } };
  for (const [key, spec] of Object.entries(specs)) options[kebab(key)] = { type: spec.type };
  let raw: Record<string, string | boolean | undefined>;
  try {
    raw = parseArgs({ args: argv, options, strict: true, allowPositionals: false, allowNegative: true }).values as typeof raw;
  } catch (err) {
    throw new InvalidInputError([{ path: 'arguments', message: `${(err as Error).message}; see --help` }]);
  }
  if (raw.help === true) return { help: true };
  const problems: Problem[] = [];
  const values: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(specs)) {
    const name = kebab(key);
    if (raw[name] === false && !spec.negatable) {
      problems.push({ path: `--no-${name}`, message: `--${name} cannot be negated` });
      continue;
    }
    try {
      values[key] = spec.parse(raw[name]);
    } catch (err) {
      problems.push({ path: `--${name}`, message: (err as Error).message });
    }
  }
  if (problems.length > 0) throw new InvalidInputError(problems);
  return { help: false, values: values as FlagValues<F> };
}

export function helpText(command: string, summary: string, specs: FlagSpecs): string {
  const rows = Object.entries(specs).map(([key, spec]) => {
    const name = spec.negatable ? `--no-${kebab(key)}` : `--${kebab(key)}`;
    const term = spec.placeholder ? `${name} <${spec.placeholder}>` : name;
    return [term, spec.shownDefault === undefined ? spec.help : `${spec.help} (default: ${spec.shownDefault})`] as const;
  });
  rows.push(['-h, --help', 'print this help']);
  const width = Math.max(...rows.map(([t]) => t.length)) + 2;
  return [
    `Usage: ${command} [options]`,
    '',
    summary,
    '',
    'Options:',
    ...rows.map(([t, h]) => `  ${t.padEnd(width)}${h}`),
    '',
    ...(Object.values(specs).some((s) => s.placeholder === 'duration') ? [`A <duration> is ${DURATION_GRAMMAR}.`] : []),
    'Configuration comes from the environment (DATABASE_URL, REDIS_URL, GENFILL_*). With GENFILL_METRICS_PORT the',
    'process serves /metrics, /healthz (alive) and /readyz (database, schema and Redis reachable; not draining).',
    'SIGTERM or SIGINT: stop taking work, finish what is in flight, exit 0.',
  ].join('\n');
}
