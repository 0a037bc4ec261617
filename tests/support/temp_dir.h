// TempDir: a fresh directory under /tmp for one test, removed with everything in it afterwards.
// writeFile and readFile: a whole file's bytes, for the files a test puts in front of the code
// under test and the ones it reads back.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace ddprun::test {

struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/ddprun-test-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp /tmp/ddprun-test-XXXXXX");
    }
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` in this directory.
  std::string file(std::string_view name) const { return path + "/" + std::string(name); }

  std::string path;
};

// Writes `bytes` to `path` (replacing the file, making its missing parent directories) and
// returns `path`. With a `mode`, the file gets exactly that mode (no umask), else a new file gets
// the usual 0666 less the umask. Throws when the file cannot be written.
inline std::string writeFile(const std::string& path, std::string_view bytes,
                             std::optional<mode_t> mode = std::nullopt) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
  if (mode && ::chmod(path.c_str(), *mode) != 0) {
    throw std::system_error(errno, std::generic_category(), "chmod " + path);
  }
  return path;
}

// The bytes of the file at `path`; empty when it cannot be read.
inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace ddprun::test
