#!/usr/bin/env node
// The genfill binary. The sources are TypeScript run through tsx's loader, so a clean
// `npm ci` is enough: there is no build step to forget.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/main.ts');
process.exitCode = await main(process.argv.slice(2));
