/** A SQL string literal: single quotes doubled, E'' form when a backslash is present. */
export function quoteLiteral(value: string): string {
  const body = value.replace(/'/g, "''");
  return value.includes('\\') ? `E'${body.replace(/\\/g, '\\\\')}'` : `'${body}'`;
}
