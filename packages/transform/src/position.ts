// Turns the offsets PostgreSQL and libpg-query report into "line L, column C" for people.
// The two use different units: parse-tree `location`s are byte offsets into the UTF-8 text,
// while error cursors (libpg-query's cursorPosition, a server error's `position`) count
// characters. Mixing them up shifts every position after a non-ASCII character.

export interface LineColumn {
  line: number;
  column: number;
}

/** 0-based character index → 1-based line and column. */
export function lineColumnAt(text: string, charIndex: number): LineColumn {
  const before = text.slice(0, Math.max(0, Math.min(charIndex, text.length)));
  const lines = before.split('\n');
  return { line: lines.length, column: (lines[lines.length - 1] ?? '').length + 1 };
}

/** 0-based UTF-8 byte offset (a parse-tree `location`) → 0-based character index. */
export function charIndexOfByte(text: string, byteOffset: number): number {
  return Buffer.from(text, 'utf8').subarray(0, Math.max(0, byteOffset)).toString('utf8').length;
}

export function describeCharIndex(text: string, charIndex: number): string {
  const { line, column } = lineColumnAt(text, charIndex);
  return `line ${line}, column ${column}`;
}

/** "line L, column C" for a parse-tree location, or '' when the parser gave none (-1). */
export function describeLocation(text: string, byteOffset: number | undefined): string {
  if (byteOffset === undefined || byteOffset < 0) return '';
  return describeCharIndex(text, charIndexOfByte(text, byteOffset));
}
