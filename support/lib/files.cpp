#include "h3c/support/files.h"

#include "h3c/support/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

namespace h3c {
namespace {

std::string errnoText() { return std::strerror(errno); }

// A temp name beside the target: same folder (so rename is atomic), unique per process and call.
fs::path tempSibling(const fs::path &path) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::string name = fmt::format(".{}.tmp-{}-{}-{:08x}", path.filename().string(), getpid(), counter++, rd());
  return path.parent_path() / name;
}

void fsyncDir(const fs::path &dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

} // namespace

std::string readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(path.string(), "cannot open for reading: {}", errnoText());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    fail(path.string(), "read failed");
  return ss.str();
}

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)), tmp_(tempSibling(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail(path_.string(), "cannot create temp file {}: {}", tmp_.string(), errnoText());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    fs::remove(tmp_, ec);
  }
}

void AtomicFileWriter::write(const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail(path_.string(), "write failed: {}", errnoText());
    }
    p += n;
    size -= size_t(n);
    written_ += uint64_t(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0)
    fail(path_.string(), "fsync failed: {}", errnoText());
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(path_.string(), "close failed: {}", errnoText());
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail(path_.string(), "rename from {} failed: {}", tmp_.string(), errnoText());
  committed_ = true;
  fsyncDir(path_.parent_path());
}

void writeFileAtomic(const fs::path &path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

AtomicDirectory::AtomicDirectory(fs::path finalPath, bool replace)
    : final_(std::move(finalPath)), tmp_(tempSibling(final_)), replace_(replace) {
  if (!replace_ && fs::exists(final_))
    fail(final_.string(), "output already exists; remove it first");
  std::error_code ec;
  if (!final_.parent_path().empty())
    fs::create_directories(final_.parent_path(), ec);
  if (!fs::create_directory(tmp_, ec))
    fail(final_.string(), "cannot create temp folder {}: {}", tmp_.string(), ec.message());
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
}

void AtomicDirectory::commit() {
  for (const auto &e : fs::directory_iterator(tmp_)) {
    if (e.is_regular_file()) {
      int fd = ::open(e.path().c_str(), O_RDONLY);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    }
  }
  fsyncDir(tmp_);
  std::error_code ec;
  if (replace_ && fs::exists(final_))
    fs::remove_all(final_, ec);
  if (::rename(tmp_.c_str(), final_.c_str()) != 0)
    fail(final_.string(), "rename from {} failed: {}", tmp_.string(), errnoText());
  committed_ = true;
  fsyncDir(final_.parent_path());
}

MappedFile::MappedFile(const fs::path &path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(path.string(), "cannot open: {}", errnoText());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path.string(), "cannot stat: {}", errnoText());
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string(), "not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void *p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(path.string(), "mmap failed: {}", errnoText());
    }
    data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
}

MappedFile::MappedFile(MappedFile &&o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile::~MappedFile() {
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
}

} // namespace h3c
