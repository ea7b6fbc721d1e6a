// Writes ../core/slimgraph/jupyter/labextension/source.json: the SHA-256 of
// the sources the prebuilt extension was built from (every file of this
// folder but node_modules/, lib/ and tsconfig.tsbuildinfo; each as its
// relative path, a NUL, its bytes, a NUL, in sorted order). The bundle's
// module ids depend on where it was built, so a rebuild elsewhere never
// equals the committed bytes; this says whether the committed build is of
// the committed sources (tests/test_jupyterlab_extension.py and
// .ci/labextension compute it again). Run by `npm run build`.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const SKIP = new Set(['node_modules', 'lib', 'tsconfig.tsbuildinfo']);

function files(dir, rel = '') {
  let out = [];
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
    if (SKIP.has(e.name)) continue;
    const r = rel ? `${rel}/${e.name}` : e.name;
    out = out.concat(e.isDirectory() ? files(dir, r) : [r]);
  }
  return out;
}

const here = new URL('.', import.meta.url).pathname;
const h = createHash('sha256');
const list = files(here).sort();
for (const f of list) {
  h.update(f + '\0');
  h.update(readFileSync(join(here, f)));
  h.update('\0');
}
const out = join(here, '..', 'core', 'slimgraph', 'jupyter', 'labextension', 'source.json');
writeFileSync(out, JSON.stringify({ source_sha256: h.digest('hex'), files: list }, null, 2) + '\n');
console.log(`stamp: ${list.length} source files -> ${out}`);
