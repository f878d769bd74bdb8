// Command-line values in the one duration grammar of @genfill/contracts (`500ms`, `30s`, `2m`), so
// a flag reads a duration as the environment does; a bare number keeps the unit the flag has
// always taken.
import { InvalidArgumentError, Option } from 'commander';
import { type DurationBounds, durationForms, durationLiteral, type DurationUnit, InvalidDurationError, parseDuration } from '@genfill/contracts';

/** A `<duration>` option whose value is milliseconds; longer than 0 unless `bounds` say otherwise. */
export function durationOption(
  flags: string,
  description: string,
  o: { bareUnit: DurationUnit; defaultMs?: number; bounds?: DurationBounds },
): Option {
  const bounds = o.bounds ?? { exclusiveMin: true };
  const option = new Option(flags, `${description}; ${durationForms(o.bareUnit)}`).argParser((value: string) => {
    try {
      return parseDuration(value, o.bareUnit, bounds);
    } catch (err) {
      throw err instanceof InvalidDurationError ? new InvalidArgumentError(err.problem) : err;
    }
  });
  return o.defaultMs === undefined ? option : option.default(o.defaultMs, durationLiteral(o.defaultMs));
}
