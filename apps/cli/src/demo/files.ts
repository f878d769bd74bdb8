// The demo submits the shipped example release, not a copy of it kept here: what the README
// shows is what the demo runs. Files go to a working directory because a release's transform
// path is relative to the release file, and adopt reads its transform from a file too.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { DEMO_ADOPT_TRANSFORM } from './seed.ts';

const EXAMPLES = new URL('../../../../examples/', import.meta.url);
const RELEASE = 'order-tax-fix.yaml';
const FIX_TRANSFORM = 'transforms/order-tax-fix.sql';
export const ADOPT_TRANSFORM = 'transforms/orders-enriched-legacy.sql';

function write(file: string, text: string): string {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, text);
  return file;
}

/** Copies the example release and its transform into `dir`; returns the release file's path. */
export function writeDemoRelease(dir: string): string {
  const release = readFileSync(new URL(RELEASE, EXAMPLES), 'utf8');
  // Fail here, not at submit with a missing file, if the example ever names another transform.
  if (!release.includes(`sql: ${FIX_TRANSFORM}`)) throw new Error(`examples/${RELEASE} no longer names ${FIX_TRANSFORM}`);
  write(join(dir, FIX_TRANSFORM), readFileSync(new URL(FIX_TRANSFORM, EXAMPLES), 'utf8'));
  return write(join(dir, RELEASE), release);
}

/** Writes the legacy pipeline's transform for adopt; returns its path. */
export function writeAdoptTransform(dir: string): string {
  return write(join(dir, ADOPT_TRANSFORM), DEMO_ADOPT_TRANSFORM);
}
