#include "core/tokenizer/merge_tokenizer.h"

#include <queue>

namespace pdserve {
namespace {

// Length of the UTF-8 unit starting at text[i]: a lead byte plus up to 3 continuation bytes (the
// grouping llama2.c uses; invalid sequences simply end up as byte tokens).
size_t CodePointLength(std::string_view text, size_t i) {
  size_t n = 1;
  while (i + n < text.size() && n < 4 && (static_cast<uint8_t>(text[i + n]) & 0xC0) == 0x80) {
    ++n;
  }
  return n;
}

struct Symbol {
  size_t begin;
  size_t length;
  int prev;
  int next;
  int id;  // token id of the whole symbol, or -1 while it is a code point without a token
};

struct Bigram {
  float score;
  int left;
  size_t length;  // combined length when queued; stale entries no longer match
  int id;
  bool operator<(const Bigram& other) const {
    return score < other.score || (score == other.score && left > other.left);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<MergeTokenizer>> MergeTokenizer::Create(Vocabulary vocabulary) {
  if (absl::Status s = vocabulary.Validate(); !s.ok()) {
    return s;
  }
  if (vocabulary.model != TokenizerModel::kSentencePiece) {
    return absl::InvalidArgumentError("MergeTokenizer needs a SentencePiece-style vocabulary");
  }
  return std::unique_ptr<MergeTokenizer>(new MergeTokenizer(std::move(vocabulary)));
}

MergeTokenizer::MergeTokenizer(Vocabulary vocabulary) : vocab_(std::move(vocabulary)) {
  std::fill(std::begin(byte_to_id_), std::end(byte_to_id_), -1);
  for (int id = 0; id < vocab_.size(); ++id) {
    TokenType type = vocab_.types[id];
    if (type == TokenType::kByte) {
      int byte = ParseBytePiece(vocab_.pieces[id]);
      if (byte_to_id_[byte] < 0) byte_to_id_[byte] = id;
    } else if (type == TokenType::kNormal || type == TokenType::kUserDefined) {
      piece_to_id_.emplace(vocab_.pieces[id], id);
    }
  }
}

int MergeTokenizer::Lookup(std::string_view piece) const {
  auto it = piece_to_id_.find(std::string(piece));
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int> MergeTokenizer::Encode(std::string_view raw_text, bool add_bos) const {
  std::vector<int> out;
  if (add_bos && vocab_.add_bos) out.push_back(vocab_.bos_id);
  if (raw_text.empty()) return out;
  std::string text;
  text.reserve(raw_text.size() + 1);
  if (vocab_.add_dummy_prefix) text.push_back(' ');
  text.append(raw_text);

  std::vector<Symbol> symbols;
  for (size_t i = 0; i < text.size();) {
    size_t n = CodePointLength(text, i);
    int index = static_cast<int>(symbols.size());
    symbols.push_back({i, n, index - 1, index + 1, Lookup(std::string_view(text).substr(i, n))});
    i += n;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& a = symbols[left];
    const Symbol& b = symbols[a.next];
    int id = Lookup(std::string_view(text).substr(a.begin, a.length + b.length));
    if (id >= 0) queue.push({vocab_.scores[id], left, a.length + b.length, id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) try_add(i);

  while (!queue.empty()) {
    Bigram top = queue.top();
    queue.pop();
    Symbol& a = symbols[top.left];
    if (a.length == 0 || a.next < 0 || a.length + symbols[a.next].length != top.length) {
      continue;  // stale: one side was merged since this pair was queued
    }
    Symbol& b = symbols[a.next];
    a.length += b.length;
    a.id = top.id;
    b.length = 0;
    a.next = b.next;
    if (a.next >= 0) symbols[a.next].prev = top.left;
    try_add(a.prev);
    try_add(top.left);
  }

  for (int i = 0; i >= 0 && i < static_cast<int>(symbols.size()); i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (size_t j = 0; j < s.length; ++j) {
      int id = byte_to_id_[static_cast<uint8_t>(text[s.begin + j])];
      out.push_back(id >= 0 ? id : vocab_.unk_id);
    }
  }
  return out;
}

std::string MergeTokenizer::DecodePiece(int prev, int id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.types[id]) {
    case TokenType::kByte:
      return std::string(1, static_cast<char>(ParseBytePiece(piece)));
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return "";
    case TokenType::kNormal:
    case TokenType::kUserDefined:
      break;
  }
  if (prev == vocab_.bos_id && !piece.empty() && piece[0] == ' ') {
    return piece.substr(1);
  }
  return piece;
}

const std::string& Tokenizer::chat_template() const {
  static const std::string* const kNone = new std::string();
  return *kNone;
}

std::string Tokenizer::Decode(const std::vector<int>& ids) const {
  std::string text;
  int prev = -1;
  for (int id : ids) {
    text += DecodePiece(prev, id);
    prev = id;
  }
  return text;
}

}  // namespace pdserve
