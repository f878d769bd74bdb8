// The projector service with a crash hook injected: `node --import tsx test/support/crashing-projector.ts
// <step> <projector flags…>` runs `genfill projector <flags…>` and SIGKILLs itself once a cutover
// or rollback has recorded <step> (sealed, switched, …), so a test proves the next holder finishes
// or undoes it. The hook lives here, not in the product: no production setting can kill the service.
import { projectorService } from '@genfill/projector-service';

const [step, ...argv] = process.argv.slice(2);
if (!step) throw new Error('usage: crashing-projector.ts <step> <projector flags…>');
process.exitCode = await projectorService({ onStep: (s) => { if (s === step) process.kill(process.pid, 'SIGKILL'); } }).main(argv);
