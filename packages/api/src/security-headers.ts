// The headers every response of the API carries (issue 28), set first so that JSON, the status
// page, Bull Board, /metrics, 404s and errors alike have them: no framing (CSP frame-ancestors
// and X-Frame-Options for older browsers), no MIME sniffing, no Referer to other sites.
// Referrer-Policy is `same-origin`, not `no-referrer`: under no-referrer a browser serializes
// the Origin of a form POST as `null` (Fetch, "serialize a request origin"), so the status
// page's own pause and resume forms would fail the CSRF origin check of same-origin.ts. A page
// that needs a wider policy sets its own Content-Security-Policy over this one (html.ts, the
// login form: both keep frame-ancestors 'none'). A dozen lines rather than helmet: these four
// headers are all the API needs, and no new dependency is needed for them.
import type { RequestHandler } from 'express';
import { BOARD_PATH } from './board.ts';

/** Nothing loads, nothing frames: JSON, text and error answers. */
export const DEFAULT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/**
 * Bull Board's UI: its scripts, styles and images from its own static path (the page sets
 * `<base href>` to it), inline styles (its loading screen and React's style attributes), its
 * JSON API on the same origin. The Google Fonts stylesheet it links is refused: the board
 * falls back to the system font and the browser calls no third party.
 */
export const BOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; " +
  "connect-src 'self'; manifest-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'";

const onBoard = (path: string) => path === BOARD_PATH || path.startsWith(`${BOARD_PATH}/`);

export const securityHeaders: RequestHandler = (req, res, next) => {
  res.setHeader('Content-Security-Policy', onBoard(req.path) ? BOARD_CSP : DEFAULT_CSP);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Referrer-Policy', 'same-origin');
  next();
};
