#include "ctitan/models/common/flops.h"

namespace ctitan::models {

ParamCount count_params(const ModelArgs& a) {
  int64_t hd = a.head_dim();
  int64_t attention = a.dim * a.n_heads * hd          // wq
                      + 2 * a.dim * a.kv_heads() * hd  // wk, wv
                      + a.n_heads * hd * a.dim;       // wo
  int64_t ffn = 3 * a.dim * a.ffn_hidden_dim();
  int64_t qk_norm = a.qk_norm ? 2 * hd : 0;
  int64_t block = attention + ffn + 2 * a.dim + qk_norm;  // + attention_norm, ffn_norm
  ParamCount c;
  c.embedding = a.vocab_size * a.dim;
  c.output = a.tie_word_embeddings ? 0 : a.dim * a.vocab_size;
  c.total = c.embedding + a.n_layers * block + a.dim /* norm */ + c.output;
  return c;
}

double parameter_count(const ModelArgs& a) {
  const double d = double(a.dim), hd = double(a.head_dim()), heads = double(a.n_heads), kv = double(a.kv_heads());
  const double block = d * heads * hd + 2 * d * kv * hd + heads * hd * d + 3 * d * double(a.ffn_hidden_dim()) + 2 * d +
                       (a.qk_norm ? 2 * hd : 0);
  const double vocab = double(a.vocab_size) * d;
  return vocab * (a.tie_word_embeddings ? 1 : 2) + double(a.n_layers) * block + d;
}

double flops_per_token(const ModelArgs& a, int64_t seq_len) {
  auto p = count_params(a);
  // A tied output layer still multiplies by vocab x dim weights each token: compute, as untied.
  double head = double(a.dim) * double(a.vocab_size) - double(p.output);
  return 6.0 * (double(p.total - p.embedding) + head) +
         12.0 * double(a.n_layers) * double(a.n_heads) * double(a.head_dim()) * double(seq_len);
}

}  // namespace ctitan::models
