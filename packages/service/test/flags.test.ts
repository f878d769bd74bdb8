import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '@genfill/contracts';
import { helpText, parseFlags } from '../src/flags.ts';
import { flag } from '../src/index.ts';

const specs = {
  concurrency: flag.count('partitions at once', 1),
  interval: flag.duration('time between rounds', 10_000, 's'),
  release: flag.list('serve only these', 'ids'),
  port: flag.port('listen here'),
  once: flag.boolean('one round'),
  throttle: flag.enabled('no throttle'),
};

function problems(argv: string[]): string[] {
  try {
    parseFlags(specs, argv);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidInputError);
    return (err as InvalidInputError).problems.map((p) => `${p.path}: ${p.message}`);
  }
  throw new Error('parsed');
}

describe('service flags', () => {
  it('parses kebab-case flags into their values, with defaults', () => {
    expect(parseFlags(specs, [])).toEqual({ help: false, values: { concurrency: 1, interval: 10_000, release: undefined, port: undefined, once: false, throttle: true } });
    expect(parseFlags(specs, ['--concurrency', '4', '--interval=0.5', '--release', 'a@1, b@2', '--port', '0', '--once', '--no-throttle'])).toEqual({
      help: false,
      values: { concurrency: 4, interval: 500, release: ['a@1', 'b@2'], port: 0, once: true, throttle: false },
    });
    expect(parseFlags(specs, ['-h'])).toEqual({ help: true });
  });

  it('refuses unknown flags, stray arguments, bad values and a negation the flag does not have — every problem named', () => {
    expect(problems(['--bogus'])).toEqual([expect.stringMatching(/^arguments: Unknown option '--bogus'/)]);
    expect(problems(['stray'])).toEqual([expect.stringMatching(/^arguments: Unexpected argument 'stray'/)]);
    expect(problems(['--concurrency', '0', '--interval', 'soon', '--port', '70000'])).toEqual([
      '--concurrency: expected a positive integer, got 0',
      "--interval: must be a duration: a number and a unit ms, s, m (minutes, also min), h or d, e.g. 500ms, 30s, 2m, 24h; a bare number is seconds; got 'soon'",
      '--port: expected a port number (0 picks a free one), got 70000',
    ]);
    expect(problems(['--no-once'])).toEqual(['--no-once: --once cannot be negated']);
  });

  it('reads a duration flag in the one grammar, a bare number in the unit the flag always took', () => {
    const interval = (argv: string[]) => {
      const p = parseFlags(specs, argv);
      return p.help ? undefined : p.values.interval;
    };
    expect(interval(['--interval', '2m'])).toBe(120_000);
    expect(interval(['--interval', '2min'])).toBe(120_000);
    expect(interval(['--interval', '250ms'])).toBe(250);
    expect(interval(['--interval', '3'])).toBe(3000);
    expect(problems(['--interval', '0s'])).toEqual(["--interval: must be longer than 0; got '0s'"]);
  });

  it('writes --help from the same declarations', () => {
    const text = helpText('genfill worker', 'build partitions', specs);
    expect(text).toMatch(/^Usage: genfill worker \[options\]\n\nbuild partitions\n/);
    expect(text).toMatch(/--concurrency <n> +partitions at once \(default: 1\)/);
    expect(text).toMatch(/--no-throttle +no throttle/);
    expect(text).toMatch(/--interval <duration> +time between rounds \(a bare number is seconds\) \(default: 10s\)/);
    expect(text).toContain('A <duration> is a number and a unit ms, s, m (minutes, also min), h or d');
    expect(text).toMatch(/GENFILL_METRICS_PORT.*\/metrics, \/healthz/s);
  });
});
