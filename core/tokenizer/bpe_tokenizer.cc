#include "core/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/unicode.h"

namespace pdserve {
namespace {

uint64_t PairKey(int left, int right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

bool IsSpecial(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(Vocabulary vocabulary) {
  if (vocabulary.model != TokenizerModel::kByteLevelBpe) {
    return absl::InvalidArgumentError("BpeTokenizer needs a byte-level BPE vocabulary");
  }
  if (absl::Status s = vocabulary.Validate(); !s.ok()) return s;
  auto tokenizer = std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(vocabulary)));
  if (absl::Status s = tokenizer->Index(); !s.ok()) return s;
  return tokenizer;
}

absl::Status BpeTokenizer::Index() {
  for (int id = 0; id < vocab_.size(); ++id) {
    const std::string& piece = vocab_.pieces[id];
    if (IsSpecial(vocab_.types[id]) && !piece.empty()) {
      specials_by_first_byte_[static_cast<unsigned char>(piece[0])].push_back(id);
    } else if (vocab_.types[id] == TokenType::kNormal) {
      piece_to_id_.emplace(piece, id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = piece_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it == piece_to_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte-level BPE vocabulary has no token for byte 0x", absl::Hex(b)));
    }
    byte_to_id_[b] = it->second;
  }
  for (int rank = 0; rank < static_cast<int>(vocab_.merges.size()); ++rank) {
    const auto& [left, right] = vocab_.merges[rank];
    const auto l = piece_to_id_.find(left), r = piece_to_id_.find(right),
               result = piece_to_id_.find(left + right);
    if (l == piece_to_id_.end() || r == piece_to_id_.end() || result == piece_to_id_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BPE merge ", rank, " ('", left, "' + '", right, "') names a piece that is not a token"));
    }
    merges_.emplace(PairKey(l->second, r->second), Merge{rank, result->second});  // first wins
  }
  FindEndsOfGeneration();
  return absl::OkStatus();
}

const BpeTokenizer::Merge* BpeTokenizer::FindMerge(int left, int right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<int> BpeTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int> out;
  if (add_bos && vocab_.add_bos) out.push_back(vocab_.bos_id);
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    int special = -1;
    size_t special_length = 0;
    for (int id : specials_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const std::string& piece = vocab_.pieces[id];
      if (piece.size() > special_length && text.substr(pos, piece.size()) == piece) {
        special = id;
        special_length = piece.size();
      }
    }
    if (special < 0) {
      ++pos;
      continue;
    }
    EncodeText(text.substr(plain_start, pos - plain_start), &out);
    out.push_back(special);
    pos += special_length;
    plain_start = pos;
  }
  EncodeText(text.substr(plain_start), &out);
  return out;
}

void BpeTokenizer::EncodeText(std::string_view text, std::vector<int>* out) const {
  if (text.empty()) return;
  std::string normalized;
  if (vocab_.normalize_nfc) {
    normalized = NormalizeNfc(text);
    text = normalized;
  }
  for (std::string_view word : PreTokenize(vocab_.pre_tokenizer, text)) EncodeWord(word, out);
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int>* out) const {
  if (vocab_.ignore_merges) {
    if (auto it = piece_to_id_.find(absl::string_view(word.data(), word.size()));
        it != piece_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int id;
    int prev;
    int next;  // -1 at the ends; a merged-away symbol has id -1
  };
  std::vector<Symbol> symbols(word.size());
  for (int i = 0; i < static_cast<int>(word.size()); ++i) {
    symbols[i] = {byte_to_id_[static_cast<unsigned char>(word[i])], i - 1,
                  i + 1 < static_cast<int>(word.size()) ? i + 1 : -1};
  }
  struct Candidate {
    int rank;
    int left;  // symbol index; leftmost first among equal ranks
    int left_id;
    int right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int right_id = symbols[symbols[left].next].id;
    if (const Merge* m = FindMerge(symbols[left].id, right_id)) {
      queue.push({m->rank, left, symbols[left].id, right_id});
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) {
      continue;  // stale: a side was merged since this pair was queued
    }
    Symbol& right = symbols[left.next];
    left.id = FindMerge(c.left_id, c.right_id)->result;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

void BpeTokenizer::FindEndsOfGeneration() {
  static constexpr std::string_view kTurnEnds[] = {
      "<|eot_id|>",    "<|eom_id|>", "<|end_of_text|>", "<|im_end|>",
      "<|endoftext|>", "<|end|>",    "<end_of_turn>"};
  std::vector<int>& ids = end_of_generation_ids_;
  ids = {vocab_.eos_id};
  if (vocab_.bos_id != vocab_.eos_id) ids.push_back(vocab_.bos_id);
  for (std::string_view text : kTurnEnds) {
    for (int id : specials_by_first_byte_[static_cast<unsigned char>(text[0])]) {
      if (vocab_.types[id] == TokenType::kControl && vocab_.pieces[id] == text &&
          std::find(ids.begin(), ids.end(), id) == ids.end()) {
        ids.push_back(id);
      }
    }
  }
}

std::string BpeTokenizer::DecodePiece(int /*prev*/, int id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  const TokenType type = vocab_.types[id];
  return type == TokenType::kNormal || type == TokenType::kUserDefined ? vocab_.pieces[id] : "";
}

}  // namespace pdserve
