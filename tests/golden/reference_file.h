// Parser of shared/reference/stories260K-greedy.txt: per prompt, its text, the prompt ids, the
// greedy ids llama2.c generated and the text it printed. Test-only.
#ifndef PDSERVE_TESTS_GOLDEN_REFERENCE_FILE_H_
#define PDSERVE_TESTS_GOLDEN_REFERENCE_FILE_H_

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pdserve::testing {

struct GoldenCase {
  std::string prompt;
  std::vector<int> prompt_ids;
  std::vector<int> gen_ids;
  std::string output;  // what llama2.c printed, trailing newline included
};

inline std::vector<int> ParseIds(const std::string& line) {
  std::istringstream in(line.substr(line.find(':') + 1));
  std::vector<int> ids;
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

// Returns the cases in file order; empty when the file cannot be read.
inline std::vector<GoldenCase> ReadGoldenCases(const std::string& path) {
  std::ifstream in(path);
  std::vector<GoldenCase> cases;
  std::string line;
  bool in_output = false;
  while (std::getline(in, line)) {
    if (line.rfind("=== PROMPT: ", 0) == 0) {
      cases.push_back({line.substr(12), {}, {}, ""});
      in_output = false;
    } else if (cases.empty()) {
      continue;
    } else if (line.rfind("prompt_ids:", 0) == 0) {
      cases.back().prompt_ids = ParseIds(line);
    } else if (line.rfind("gen_ids:", 0) == 0) {
      cases.back().gen_ids = ParseIds(line);
    } else if (line == "--- OUTPUT:") {
      in_output = true;
    } else if (line.rfind("--- achieved", 0) == 0 || line.rfind("=== CROSS", 0) == 0) {
      in_output = false;
    } else if (in_output) {
      cases.back().output += line + "\n";
    }
  }
  return cases;
}

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_GOLDEN_REFERENCE_FILE_H_
