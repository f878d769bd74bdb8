// An upload's body, read whole before any database connection is taken for it (issue 28,
// finding "eight slow uploads hold the API's whole pool"). Before this, POST /datasets/:ds/events
// streamed the request into COPY: a client sending a byte every 2 s held a connection for as
// long as it liked, and eight of them held the pool that GET /releases needs.
//
// Three bounds, each answered with a status and the connection closed:
// - the body's size (GENFILL_API_INGEST_MAX_BYTES): 413, from Content-Length before a byte is
//   read, or as soon as a chunked body passes it;
// - a minimum rate: fewer than GENFILL_API_INGEST_MIN_BYTES_PER_SECOND × the window's seconds
//   arriving within one window (GENFILL_API_INGEST_RATE_WINDOW) is 408;
// - a deadline for the whole body (GENFILL_API_INGEST_BODY_TIMEOUT), whatever its rate: 408.
// The body is held in memory, so GENFILL_API_INGEST_MAX_UPLOADS × the size bound is the most it
// takes; the CLI's `genfill ingest` streams files of any size.
import type { Request, Response } from 'express';
import { RequestRefusedError } from './http-errors.ts';

export interface UploadLimits {
  maxBytes: number;
  minBytesPerSecond: number;
  windowMs: number;
  timeoutMs: number;
}

/** The client went away before its body was read: nobody is left to answer. */
export class ClientGoneError extends Error {
  constructor() {
    super('the client closed the connection before its body arrived');
    this.name = 'ClientGoneError';
  }
}

const seconds = (ms: number) => `${Math.round(ms / 100) / 10}s`;

/** 413 before reading anything, when Content-Length already says the body is too large. */
export function refuseDeclaredSize(req: Request, limits: UploadLimits): void {
  const declared = Number(req.get('content-length'));
  if (Number.isFinite(declared) && declared > limits.maxBytes) {
    throw new RequestRefusedError(
      413,
      `the body is ${declared} bytes, more than GENFILL_API_INGEST_MAX_BYTES (${limits.maxBytes}): nothing was read or written — split the file, or use \`genfill ingest\`, which streams any size`,
    );
  }
}

/** The whole body, or a RequestRefusedError (408, 413) / ClientGoneError; the request is left paused. */
export function readBody(req: Request, limits: UploadLimits): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    let inWindow = 0;
    const perWindow = Math.ceil((limits.minBytesPerSecond * limits.windowMs) / 1000);
    let settled = false;
    const settle = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearInterval(window);
      clearTimeout(deadline);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      req.off('error', onError);
      if (err) {
        req.pause();
        reject(err);
      } else resolve(chunks);
    };
    const window = setInterval(() => {
      if (inWindow < perWindow) {
        settle(
          new RequestRefusedError(
            408,
            `the body arrived at ${inWindow} bytes in ${seconds(limits.windowMs)}, slower than GENFILL_API_INGEST_MIN_BYTES_PER_SECOND (${limits.minBytesPerSecond}): ` +
              'the upload was cut and nothing was written — send it again over a faster link, or use `genfill ingest`',
          ),
        );
      }
      inWindow = 0;
    }, limits.windowMs);
    const deadline = setTimeout(
      () =>
        settle(
          new RequestRefusedError(
            408,
            `the body took longer than GENFILL_API_INGEST_BODY_TIMEOUT (${seconds(limits.timeoutMs)}) to arrive: the upload was cut and nothing was written — split the file, or use \`genfill ingest\``,
          ),
        ),
      limits.timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      total += chunk.length;
      inWindow += chunk.length;
      if (total > limits.maxBytes) {
        settle(
          new RequestRefusedError(
            413,
            `the body is more than GENFILL_API_INGEST_MAX_BYTES (${limits.maxBytes}) bytes: the upload was cut and nothing was written — split the file, or use \`genfill ingest\`, which streams any size`,
          ),
        );
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => settle();
    const onClose = () => {
      if (!req.complete) settle(new ClientGoneError());
    };
    const onError = (err: Error) => settle(err);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('close', onClose);
    req.on('error', onError);
  });
}

/**
 * Answer without reading the rest of the body: the response says `Connection: close`, and
 * node closes the socket once it is written instead of reading what the client still sends.
 */
export function closeUnlessRead(req: Request, res: Response): void {
  if (!req.complete && !res.headersSent) res.setHeader('Connection', 'close');
}

/** A read body as the async iterable ingest() consumes; each chunk is let go once handed on. */
export async function* chunksOf(chunks: Buffer[]): AsyncGenerator<Buffer> {
  for (let i = 0; i < chunks.length; i++) {
    const c = chunks[i]!;
    chunks[i] = Buffer.alloc(0);
    yield c;
  }
}
