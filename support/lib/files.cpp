#include "h3c/support/files.h"

#include "h3c/support/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

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

// Opens an input for reading without ever blocking (O_NONBLOCK: opening a FIFO with no writer would wait forever)
// and refuses anything but a regular file: a FIFO, a character device (/dev/zero, /dev/stdin) or a socket has no
// size to check and may never end.
int openInput(const fs::path &path, struct stat &st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    fail(path.string(), "cannot open for reading: {}", errnoText());
  if (::fstat(fd, &st) != 0) {
    std::string why = errnoText();
    ::close(fd);
    fail(path.string(), "cannot stat: {}", why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string(), "not a regular file ({}): inputs must be plain files",
         S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a named pipe" : S_ISCHR(st.st_mode) ? "a character device"
                             : S_ISSOCK(st.st_mode) ? "a socket" : S_ISBLK(st.st_mode) ? "a block device" : "special file");
  }
  return fd;
}

} // namespace

std::string readFile(const fs::path &path, uint64_t maxBytes) {
  struct stat st {};
  int fd = openInput(path, st);
  if (uint64_t(st.st_size) > maxBytes) {
    ::close(fd);
    fail(path.string(), "file is {} bytes, more than the {} bytes this input may have", uint64_t(st.st_size), maxBytes);
  }
  // Read at most the size seen (+1 to notice growth): a file that grows while read is refused, never read unbounded.
  std::string out(size_t(st.st_size) + 1, '\0');
  size_t have = 0;
  while (have < out.size()) {
    ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      std::string why = errnoText();
      ::close(fd);
      fail(path.string(), "read failed: {}", why);
    }
    if (n == 0)
      break;
    have += size_t(n);
  }
  ::close(fd);
  if (have != size_t(st.st_size))
    fail(path.string(), "changed size while being read ({} bytes, then {})", uint64_t(st.st_size), have);
  out.resize(have);
  return out;
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
  struct stat st {};
  int fd = openInput(path, st);
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void *p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = errnoText();
      ::close(fd);
      fail(path.string(), "mmap failed: {}", why);
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

namespace {

struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId &o) const { return dev == o.dev && ino == o.ino; }
};

// The ids of `p` (when it exists) and of every existing folder above it, innermost first; `exists` says whether the
// first entry is p itself. Symbolic links in the existing prefix are resolved first.
std::vector<FileId> idChain(const fs::path &p, bool &exists) {
  std::error_code ec;
  fs::path q = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec)
    q = fs::absolute(p).lexically_normal();
  std::vector<FileId> chain;
  exists = false;
  for (bool first = true;; first = false) {
    struct stat st {};
    if (::stat(q.c_str(), &st) == 0) {
      chain.push_back({st.st_dev, st.st_ino});
      if (first)
        exists = true;
    }
    if (q == q.root_path() || !q.has_parent_path() || q.parent_path() == q)
      break;
    q = q.parent_path();
  }
  return chain;
}

bool contains(const std::vector<FileId> &v, const FileId &id, size_t from) {
  for (size_t i = from; i < v.size(); ++i)
    if (v[i] == id)
      return true;
  return false;
}

} // namespace

void checkOutputsApart(const std::vector<PathArg> &inputs, const std::vector<PathArg> &outputs) {
  struct Entry {
    const PathArg *arg;
    std::vector<FileId> chain;
    bool exists;
  };
  auto entries = [](const std::vector<PathArg> &v) {
    std::vector<Entry> out;
    for (const auto &a : v)
      if (!a.path.empty()) {
        Entry e{&a, {}, false};
        e.chain = idChain(a.path, e.exists);
        out.push_back(std::move(e));
      }
    return out;
  };
  const std::vector<Entry> ins = entries(inputs), outs = entries(outputs);
  auto clash = [](const Entry &o, const Entry &i, const char *what) {
    if (!i.exists)
      return;  // nothing there to destroy (a named config such as "tiny", an output not written yet)
    if (o.exists && o.chain[0] == i.chain[0])
      fail(o.arg->option, "'{}' is the same file as {} '{}': an output never overwrites {}", o.arg->path.string(),
           i.arg->option, i.arg->path.string(), what);
    if (contains(o.chain, i.chain[0], o.exists ? 1 : 0))
      fail(o.arg->option, "'{}' lies inside {} '{}': an output is never written into {}", o.arg->path.string(),
           i.arg->option, i.arg->path.string(), what);
    if (o.exists && i.exists && contains(i.chain, o.chain[0], 1))
      fail(o.arg->option, "'{}' holds {} '{}': replacing it would destroy {}", o.arg->path.string(), i.arg->option,
           i.arg->path.string(), what);
  };
  for (const Entry &o : outs)
    for (const Entry &i : ins)
      clash(o, i, "an input");
  // Two outputs on one path: the second write would replace the first. Compared lexically too, since neither may
  // exist yet.
  for (size_t a = 0; a < outs.size(); ++a)
    for (size_t b = a + 1; b < outs.size(); ++b) {
      auto resolved = [](const fs::path &p) {
        std::error_code ec;
        fs::path r = fs::weakly_canonical(fs::absolute(p), ec).lexically_normal();
        return r.has_filename() ? r : r.parent_path();  // "out/" and "out" are one folder
      };
      const std::string ra = resolved(outs[a].arg->path).string(), rb = resolved(outs[b].arg->path).string();
      if (ra == rb)
        fail(outs[b].arg->option, "'{}' is also given as {}", outs[b].arg->path.string(), outs[a].arg->option);
      if (rb.rfind(ra + "/", 0) == 0 || ra.rfind(rb + "/", 0) == 0)
        fail(outs[b].arg->option, "'{}' and {} '{}' nest: one output would be written into the other",
             outs[b].arg->path.string(), outs[a].arg->option, outs[a].arg->path.string());
      clash(outs[b], outs[a], "another output");
    }
}

namespace {
void onSigbus(int) {
  // Async-signal-safe: write(2) and _exit only.
  static const char msg[] = "h3c: error: a memory-mapped input file shrank while it was read (SIGBUS); nothing "
                            "half-written was kept\n";
  ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  (void)ignored;
  ::_exit(kExitError);
}
} // namespace

void installMappedFileFaultHandler() {
  struct sigaction sa {};
  sa.sa_handler = onSigbus;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

} // namespace h3c
