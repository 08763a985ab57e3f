"""Reference side of tests/data/hf_tokenizer_test.cpp: Hugging Face's own `tokenizers` and
`transformers` libraries, which ctitan's tokenizer.json reader and writer must agree with.

  train  CORPUS.json STYLE VOCAB OUT_DIR   train a byte-level BPE with `tokenizers` (STYLE llama3:
                                           Split(pattern) + ByteLevel, specials at ids 0 and 1;
                                           gpt2: ByteLevel with its regex, one <|endoftext|>), save
                                           OUT_DIR/tokenizer.json, and OUT_DIR/ids.json with every
                                           document's ids
  encode CORPUS.json TOKENIZER_DIR OUT.json  load TOKENIZER_DIR with `tokenizers` and with
                                           transformers' AutoTokenizer; write ids, special ids,
                                           AutoTokenizer's ids of document 0 and its decode
  ids    CORPUS.json TOKENIZER.json OUT.json  `tokenizers` alone: every document's ids
CORPUS.json is {"docs": [...], "pattern": "<Llama 3 split regex>"}.
"""
import json
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers


def train(corpus_path, style, vocab_size, out_dir):
    corpus = json.load(open(corpus_path))
    if style == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(corpus["pattern"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus["docs"], trainer)
    tok.save(f"{out_dir}/tokenizer.json")
    ids = [tok.encode(d, add_special_tokens=False).ids for d in corpus["docs"]]
    json.dump({"ids": ids}, open(f"{out_dir}/ids.json", "w"))


def encode(corpus_path, tokenizer_dir, out_path):
    from transformers import AutoTokenizer

    corpus = json.load(open(corpus_path))
    tok = Tokenizer.from_file(f"{tokenizer_dir}/tokenizer.json")
    ids = [tok.encode(d, add_special_tokens=False).ids for d in corpus["docs"]]
    auto = AutoTokenizer.from_pretrained(tokenizer_dir)
    first = auto(corpus["docs"][0])["input_ids"]
    json.dump({
        "ids": ids,
        "bos_token_id": auto.bos_token_id,
        "eos_token_id": auto.eos_token_id,
        "auto_first_ids": first,
        "auto_first_decoded": auto.decode(first, skip_special_tokens=True),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
    }, open(out_path, "w"))


def ids_only(corpus_path, tokenizer_path, out_path):
    corpus = json.load(open(corpus_path))
    tok = Tokenizer.from_file(tokenizer_path)
    json.dump({"ids": [tok.encode(d, add_special_tokens=False).ids for d in corpus["docs"]]}, open(out_path, "w"))


if __name__ == "__main__":
    if sys.argv[1] == "ids":
        ids_only(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
