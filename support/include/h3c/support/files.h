// File helpers: whole-file reads, read-only memory maps, and atomic writes (temp file in the same folder, fsync,
// rename) so that a failed or interrupted command never leaves a half-written output behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace h3c {

// A whole regular file (FIFOs, devices and sockets are refused before anything is read, without blocking), at most
// `maxBytes` long: h3c's JSON and text inputs are small, and an unbounded read is an out-of-memory waiting to happen.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t(1) << 30;
std::string readFile(const std::filesystem::path &path, uint64_t maxBytes = kMaxTextFileBytes);

// Writes `bytes` to `path` atomically (temp + fsync + rename + fsync of the folder).
void writeFileAtomic(const std::filesystem::path &path, std::string_view bytes);

// Streams into a temp file beside `path`; on success renames it into place, on exception removes it.
// The callback receives the open file descriptor-backed writer.
class AtomicFileWriter {
public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();  // removes the temp file unless commit() ran
  AtomicFileWriter(const AtomicFileWriter &) = delete;
  AtomicFileWriter &operator=(const AtomicFileWriter &) = delete;
  void write(const void *data, size_t size);
  void write(std::string_view s) { write(s.data(), s.size()); }
  uint64_t bytesWritten() const { return written_; }
  void commit();  // fsync, close, rename, fsync the folder

private:
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// A folder built under a temp name and renamed into place when complete ("nothing half-written" for multi-file
// outputs such as checkpoint folders and plans). The final path must not exist, unless `replace` is set.
class AtomicDirectory {
public:
  explicit AtomicDirectory(std::filesystem::path finalPath, bool replace = false);
  ~AtomicDirectory();  // removes the temp folder unless commit() ran
  AtomicDirectory(const AtomicDirectory &) = delete;
  AtomicDirectory &operator=(const AtomicDirectory &) = delete;
  const std::filesystem::path &tempPath() const { return tmp_; }
  void commit();

private:
  std::filesystem::path final_, tmp_;
  bool replace_;
  bool committed_ = false;
};

// A read-only memory map of a whole regular file (other file types are refused as readFile does). Empty files map to
// size 0 with data() == nullptr. A file truncated while mapped makes later reads fault (SIGBUS):
// installMappedFileFaultHandler() turns that into an error exit naming the cause.
class MappedFile {
public:
  explicit MappedFile(const std::filesystem::path &path);
  ~MappedFile();
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&) = delete;
  MappedFile(const MappedFile &) = delete;
  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path &path() const { return path_; }

private:
  std::filesystem::path path_;
  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

// Outputs never alias inputs. A command names its input and output paths (with the option that gave each, for the
// message); an output is refused when it is an input (the same file by resolved path or by device + inode, so
// symbolic links, hard links and bind mounts are caught), lies inside an input folder, is a folder holding an input,
// or is another output. Empty paths are skipped. Call before anything is written.
struct PathArg {
  std::string option;  // "--ledger", "OUT", ...
  std::filesystem::path path;
};
void checkOutputsApart(const std::vector<PathArg> &inputs, const std::vector<PathArg> &outputs);

// Installs a SIGBUS handler that prints "h3c: error: a memory-mapped input file shrank while it was read (SIGBUS)"
// and exits with kExitError (2). Outputs are written atomically, so nothing half-written stays behind.
void installMappedFileFaultHandler();

} // namespace h3c
