// File helpers: whole-file reads, read-only memory maps, and atomic writes (temp file in the same folder, fsync,
// rename) so that a failed or interrupted command never leaves a half-written output behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace h3c {

std::string readFile(const std::filesystem::path &path);

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

// A read-only memory map of a whole file. Empty files map to size 0 with data() == nullptr.
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

} // namespace h3c
