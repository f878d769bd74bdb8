// The one place that turns a user's transform into the query genfill runs: the partition's
// rows are bound to a CTE named `source`, and the transform is nested as a subquery, whose
// own WITH clauses still see the outer `source` (CTE names are visible in nested queries).

/** Text before the transform in the wrapped query; exported so error positions map back. */
export function wrapPrefix(sourceSql: string): string {
  // Newlines (not spaces) around both inserts: a trailing `-- comment` in either part would
  // otherwise swallow the closing parenthesis.
  return `WITH source AS (\n${sourceSql}\n)\nSELECT * FROM (\n`;
}

const WRAP_SUFFIX = '\n) AS genfill_transform';

export function wrapTransform(transformSql: string, sourceSql: string): string {
  return wrapPrefix(sourceSql) + stripTrailingSemicolons(transformSql) + WRAP_SUFFIX;
}

/**
 * Drops statement terminators at the end (`;`, possibly followed by whitespace and comments),
 * which are legal in a file but not inside parentheses. Only a `;` followed by nothing but
 * whitespace and comments is cut. This is a textual scan, not a tokenizer: a literal ending in
 * `;--…` on the last line would be cut wrongly, which then fails to parse (never runs wrongly).
 * The kept text is always a prefix of the input, so offsets into it are offsets into the file.
 */
export function stripTrailingSemicolons(sql: string): string {
  let text = sql;
  for (;;) {
    let at = text.lastIndexOf(';');
    // The rightmost `;` may sit inside a trailing comment (`; -- a ; b`): try the next one left.
    while (at >= 0 && !onlyWhitespaceAndComments(text.slice(at + 1))) {
      at = at > 0 ? text.lastIndexOf(';', at - 1) : -1;
    }
    if (at < 0) return text.trimEnd();
    text = text.slice(0, at);
  }
}

function onlyWhitespaceAndComments(tail: string): boolean {
  let rest = tail;
  for (;;) {
    rest = rest.trimStart();
    if (rest === '') return true;
    if (rest.startsWith('--')) {
      const nl = rest.indexOf('\n');
      if (nl < 0) return true;
      rest = rest.slice(nl + 1);
    } else if (rest.startsWith('/*')) {
      // Block comments nest in PostgreSQL; a nested one here is rare enough to not cut.
      const end = rest.indexOf('*/');
      if (end < 0 || rest.slice(2, end).includes('/*')) return false;
      rest = rest.slice(end + 2);
    } else {
      return false;
    }
  }
}
