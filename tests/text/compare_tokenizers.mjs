// Compares halo's tokenizer (through the tokenize_dump executable) with Hugging
// Face's own JavaScript implementation, @huggingface/tokenizers, on a corpus.
//
//   node compare_tokenizers.mjs --dump PATH/TO/tokenize_dump --root HALO_SOURCE_DIR
//        [--corpus FILE.jsonl] [--only NAME]
//
// For each tokenizer (tests/data/tokenizers/* and models/pkgchat-5m) it checks
// encode(text) (with and without special tokens) and decode(ids) with
// skip_special_tokens true and false. Prints every mismatch; exits 1 on any.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const INSTALL_HINT =
  "run scripts/install-deps.sh --test (needs Node 20 and the npm package @huggingface/tokenizers in tests/js/node_modules)";

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(arg("root", path.join(here, "..", "..")));
const dump = arg("dump");
const corpusPath = arg("corpus", path.join(here, "corpus.jsonl"));
const only = arg("only");
if (!dump || !fs.existsSync(dump)) {
  console.error(`compare_tokenizers: --dump must name the built tokenize_dump executable (got ${dump})`);
  process.exit(1);
}

const pkgDir = path.join(root, "tests", "js", "node_modules", "@huggingface", "tokenizers");
const pkgEntry = path.join(pkgDir, "dist", "tokenizers.mjs");
if (!fs.existsSync(pkgEntry)) {
  console.error(`compare_tokenizers: ${pkgEntry} is missing: ${INSTALL_HINT}`);
  process.exit(1);
}
const { Tokenizer } = await import(pathToFileURL(pkgEntry).href);

const dirs = [
  ...["llama2", "llama3", "mistral", "qwen3"].map((n) => path.join(root, "tests", "data", "tokenizers", n)),
  path.join(root, "models", "pkgchat-5m"),
].filter((d) => !only || path.basename(d) === only);

const texts = fs
  .readFileSync(corpusPath, "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => {
    const j = JSON.parse(l);
    return typeof j === "string" ? j : j.text;
  });

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const show = (s) => JSON.stringify(s);
let failures = 0;

for (const dir of dirs) {
  const name = path.basename(dir);
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const ref = new Tokenizer(tj, cfg);
  let out;
  try {
    out = execFileSync(dump, [dir, corpusPath], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "inherit"] });
  } catch (e) {
    console.error(`[${name}] tokenize_dump failed: ${e.message}`);
    failures++;
    continue;
  }
  const rows = out.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
  if (rows.length !== texts.length) {
    console.error(`[${name}] tokenize_dump wrote ${rows.length} rows for ${texts.length} texts`);
    failures++;
    continue;
  }
  let bad = 0;
  const dec = (ids, skip) => (ids.length === 0 ? "" : ref.decode(ids, { skip_special_tokens: skip }));
  texts.forEach((text, i) => {
    const got = rows[i];
    const ids = ref.encode(text).ids;
    const plain = ref.encode(text, { add_special_tokens: false }).ids;
    const problems = [];
    if (!same(ids, got.ids)) problems.push(`ids\n    hf:   ${show(ids)}\n    halo: ${show(got.ids)}`);
    if (!same(plain, got.ids_plain))
      problems.push(`ids (add_special_tokens=false)\n    hf:   ${show(plain)}\n    halo: ${show(got.ids_plain)}`);
    // Decode the ids halo produced, so a decode check does not depend on encode agreeing.
    const d = dec(got.ids, true);
    if (d !== got.decoded) problems.push(`decode(skip_special_tokens=true)\n    hf:   ${show(d)}\n    halo: ${show(got.decoded)}`);
    const r = dec(got.ids, false);
    if (r !== got.decoded_raw)
      problems.push(`decode(skip_special_tokens=false)\n    hf:   ${show(r)}\n    halo: ${show(got.decoded_raw)}`);
    if (problems.length > 0) {
      bad++;
      console.log(`[${name}] MISMATCH for text ${i} ${show(text)}\n  ${problems.join("\n  ")}`);
    }
  });
  console.log(`[${name}] ${texts.length - bad}/${texts.length} texts match`);
  failures += bad;
}
if (failures > 0) {
  console.log(`compare_tokenizers: ${failures} mismatches`);
  process.exit(1);
}
console.log("compare_tokenizers: all tokenizers match @huggingface/tokenizers");
