// Streaming a checkpoint's stored tensors through staging buffers (checkpoint_stream.h): the plan (which stored
// bytes land where), the workers (read, check, hash, hand over) and the summary line.
#include "h3c/runtime/checkpoint_stream.h"

#include "h3c/runtime/tensor.h"
#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace fs = std::filesystem;

namespace h3c::rt {

StreamPlan planStream(const h3::Checkpoint &ck, std::vector<StreamTarget> targets,
                      const std::set<std::string> &castToBf16) {
  const st::Folder &folder = ck.storage();
  StreamPlan plan;
  plan.dir = folder.dir();
  std::unordered_map<const st::File *, size_t> fileIndex;
  for (const auto &f : folder.files()) {
    fileIndex.emplace(f.get(), plan.files.size());
    plan.files.push_back(f->path());
  }
  std::unordered_map<std::string, size_t> stored;
  for (const std::string &name : folder.names()) {
    const st::Folder::Entry &e = folder.at(name);
    StoredTensor t;
    t.name = name;
    t.dtype = e.info->dtype;
    t.file = fileIndex.at(e.file);
    t.fileOffset = e.file->header().dataOffset + e.info->begin;
    t.bytes = e.info->nbytes();
    plan.totalBytes += t.bytes;
    stored.emplace(name, plan.tensors.size());
    plan.tensors.push_back(std::move(t));
  }
  // Tensors stored F32 and placed as BF16: only in diffusers naming (a stored name is the diffusers name), only F32.
  for (const std::string &name : castToBf16) {
    if (ck.format() != h3::CheckpointFormat::Diffusers)
      fail(plan.dir.string(), "tensor '{}': F32 is read as BF16 only from a folder in diffusers naming", name);
    auto it = stored.find(name);
    if (it == stored.end() || plan.tensors[it->second].dtype != DType::F32)
      fail(plan.dir.string(), "internal error: '{}' is to be read as BF16 but is no stored F32 tensor", name);
    plan.tensors[it->second].castToBf16 = true;
  }
  // Where each diffusers tensor's bytes are stored: itself in a diffusers folder, the mapper's byte ranges of native
  // tensors (concatenated in order) in a native one.
  std::unordered_map<std::string, std::vector<h3::SourcePiece>> sources;
  if (ck.format() == h3::CheckpointFormat::Native)
    for (auto &m : h3::diffusersFromNative(h3::diffusersTensors(ck.config()), ck.config(), ck.qkvLayout()))
      sources.emplace(m.spec.name, std::move(m.pieces));
  std::unordered_map<std::string, size_t> seen;
  for (size_t k = 0; k < targets.size(); ++k) {
    const StreamTarget &tg = targets[k];
    if (!seen.emplace(tg.name, k).second)
      fail("weight " + tg.name, "is a load target twice");
    if (!ck.find(tg.name))
      fail(plan.dir.string(), "tensor '{}' is not in the checkpoint", tg.name);
    const bool cast = castToBf16.count(tg.name) > 0;
    const uint64_t placed = cast ? ck.nbytes(tg.name) / 2 : ck.nbytes(tg.name);
    if (placed != tg.bytes)
      fail("weight " + tg.name, "the checkpoint holds {} bytes{}, the target {}", placed,
           cast ? " (as BF16, rounded from F32)" : "", tg.bytes);
    std::vector<h3::SourcePiece> pieces;
    if (ck.format() == h3::CheckpointFormat::Native)
      pieces = sources.at(tg.name);
    else
      pieces.push_back({tg.name, 0, tg.bytes});
    uint64_t at = 0;
    for (const auto &p : pieces) {
      auto it = stored.find(p.source);
      if (it == stored.end())
        fail(plan.dir.string(), "stored tensor '{}' is missing (diffusers '{}' is built from it)", p.source, tg.name);
      StoredTensor &t = plan.tensors[it->second];
      if (p.offset > t.placedBytes() || p.length > t.placedBytes() - p.offset)
        fail(t.name, "internal error: a piece of '{}' lies outside the stored tensor", tg.name);
      if (p.length)
        t.pieces.push_back({p.offset, p.length, k, at});
      at += p.length;
    }
    if (at != tg.bytes)
      fail("weight " + tg.name, "internal error: its stored pieces hold {} bytes, the tensor {}", at, tg.bytes);
  }
  for (auto &t : plan.tensors)
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const StreamPiece &a, const StreamPiece &b) { return a.offset < b.offset; });
  plan.targets = std::move(targets);
  return plan;
}

std::vector<StreamChunk> chunksOf(const StoredTensor &t, size_t tensor, uint64_t chunkBytes) {
  if (chunkBytes == 0 || chunkBytes % 8)
    fail("checkpoint stream", "chunk size {} is not a positive multiple of 8", chunkBytes);
  std::vector<StreamChunk> v;
  for (uint64_t at = 0; at < t.bytes; at += chunkBytes)
    v.push_back({tensor, at, std::min(chunkBytes, t.bytes - at)});
  return v;
}

std::vector<StreamCopy> copiesOf(const StreamPlan &plan, const StreamChunk &c) {
  std::vector<StreamCopy> v;
  const StoredTensor &t = plan.tensors.at(c.tensor);
  // The chunk's placed bytes: its stored bytes, or half of them (BF16 from F32; chunks hold whole F32 values).
  const uint64_t begin = t.castToBf16 ? c.offset / 2 : c.offset;
  const uint64_t end = t.castToBf16 ? (c.offset + c.length) / 2 : c.offset + c.length;
  for (const StreamPiece &p : t.pieces) {
    const uint64_t b = std::max(p.offset, begin), e = std::min(p.offset + p.length, end);
    if (b >= e)
      continue;
    const StreamTarget &tg = plan.targets.at(p.target);
    v.push_back({b - begin, e - b, tg.address + p.targetOffset + (b - p.offset)});
  }
  return v;
}

namespace {

// The shards, opened once for every worker (pread has no shared file position).
class OpenFiles {
public:
  explicit OpenFiles(const std::vector<fs::path> &paths) {
    for (const auto &p : paths) {
      int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        close();
        fail(p.string(), "cannot open for reading: {}", std::strerror(err));
      }
      fds_.push_back(fd);
    }
  }
  ~OpenFiles() { close(); }
  int fd(size_t i) const { return fds_.at(i); }

private:
  void close() {
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }
  std::vector<int> fds_;
};

// Reads exactly n bytes at `offset`; a file that ends early (truncated since it was opened and validated) or a read
// error is an error naming the file and the tensor.
void readExactly(int fd, uint8_t *dst, uint64_t n, uint64_t offset, const fs::path &file, const StoredTensor &t) {
  uint64_t done = 0;
  while (done < n) {
    const size_t want = size_t(std::min<uint64_t>(n - done, uint64_t(1) << 30));
    const ssize_t got = ::pread(fd, dst + done, want, off_t(offset + done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      fail(file.string(), "tensor '{}': reading bytes [{}, {}) of the file failed: {}", t.name, offset + done,
           offset + n, std::strerror(errno));
    if (got == 0)
      fail(file.string(), "tensor '{}': the file ends at byte {} but the tensor's bytes run to {} (was it truncated "
           "or replaced while loading?)", t.name, offset + done, t.fileOffset + t.bytes);
    done += uint64_t(got);
  }
}

// The bytes of a chunk are read, checked and hashed in steps that stay in the core's cache between the three.
constexpr uint64_t kReadStep = uint64_t(512) << 10;

} // namespace

StreamResult streamCheckpoint(const h3::Checkpoint &ck, const StreamPlan &plan, StreamSink &sink,
                              const StreamOptions &opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (plan.tensors.size() != ck.storage().names().size())
    fail(plan.dir.string(), "internal error: the stream plan is not this checkpoint's");
  OpenFiles files(plan.files);
  StreamResult r;
  r.sha256.assign(plan.tensors.size(), std::string());
  // Largest first, so the last tensors taken are short and the workers finish together.
  std::vector<size_t> order(plan.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return plan.tensors[a].bytes > plan.tensors[b].bytes; });
  std::vector<Tensor::NonFinite> nonFinite(plan.tensors.size());
  std::atomic<size_t> next{0}, tensorsDone{0}, running{0};
  std::atomic<uint64_t> bytesDone{0}, copied{0};
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards error and the wake-up of the calling thread
  std::condition_variable cv;
  std::exception_ptr error;
  auto failWith = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = e;
    stop = true;
  };
  auto work = [&](int w) {
    try {
      sink.beginWorker(w);
      for (size_t k; !stop && (k = next.fetch_add(1)) < order.size();) {
        const size_t i = order[k];
        const StoredTensor &t = plan.tensors[i];
        const fs::path &file = plan.files.at(t.file);
        const size_t es = dtypeSize(t.dtype);
        Sha256 sha;
        Tensor::NonFinite nf;
        for (const StreamChunk &c : chunksOf(t, i, opt.chunkBytes)) {
          if (stop)
            return;
          uint8_t *buf = sink.buffer(w);
          for (uint64_t s = 0; s < c.length; s += kReadStep) {
            const uint64_t n = std::min(kReadStep, c.length - s);
            readExactly(files.fd(t.file), buf + s, n, t.fileOffset + c.offset + s, file, t);
            sha.update(buf + s, size_t(n));  // the stored bytes: the snapshot's hash
            uint8_t *placed = buf + s;
            uint64_t placedBytes = n;
            if (t.castToBf16) {
              // In place: step s's BF16 values go to buf + s / 2, before any F32 value not yet rounded (s is a
              // multiple of the step, n of 4 bytes: chunks and steps hold whole F32 values).
              placed = buf + s / 2;
              placedBytes = n / 2;
              roundF32ToBf16(buf + s, placed, size_t(n / 4));
            }
            // NaN / Inf of the values placed: after a cast, an F32 value beyond BF16's range is Inf.
            Tensor::scanNonFinite(t.placedDtype(), placed, size_t(placedBytes), int64_t((c.offset + s) / es), nf);
            bytesDone += n;
          }
          const std::vector<StreamCopy> copies = copiesOf(plan, c);
          sink.copy(w, copies);
          for (const auto &cp : copies) copied += cp.length;
        }
        r.sha256[i] = sha.hexDigest();
        nonFinite[i] = nf;
        if (nf.first >= 0 && opt.strictFinite)
          fail("weights:" + t.name, "holds non-finite values: {}; a strict run refuses them ({})", nf.text(),
               file.string());
        ++tensorsDone;
      }
    } catch (...) {
      failWith(std::current_exception());
    }
  };
  const int workers = std::max(1, std::min<int>(opt.workers, int(std::max<size_t>(1, order.size()))));
  std::vector<std::thread> pool;
  pool.reserve(size_t(workers));
  for (int w = 0; w < workers; ++w) {
    try {
      ++running;
      pool.emplace_back([&, w] {
        work(w);
        std::lock_guard<std::mutex> lock(mu);
        --running;
        cv.notify_all();
      });
    } catch (...) {  // a thread that cannot start: the others do its share
      --running;
      break;
    }
  }
  if (pool.empty()) {  // not even one thread: the calling thread streams (without progress lines)
    work(0);
  } else {
    std::unique_lock<std::mutex> lock(mu);
    while (running > 0) {
      cv.wait_for(lock, std::chrono::milliseconds(200));
      if (opt.progress && running > 0) {
        lock.unlock();
        try {  // nothing may leave this loop while workers are joinable (std::terminate): it stops them instead
          opt.progress(tensorsDone, plan.tensors.size(), bytesDone);
        } catch (...) {
          failWith(std::current_exception());
        }
        lock.lock();
      }
    }
  }
  for (auto &t : pool) t.join();
  try {
    sink.finish();  // also after a failure: no copy may still read a staging buffer
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error)
    std::rethrow_exception(error);
  for (size_t i = 0; i < plan.tensors.size(); ++i)
    if (nonFinite[i].first >= 0)
      r.nonFinite[plan.tensors[i].name] = nonFinite[i].text();
  r.bytes = bytesDone;
  r.copied = copied;
  r.contentSha256 = h3::contentSha256(ck.storage(), r.sha256);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt.progress)
    opt.progress(plan.tensors.size(), plan.tensors.size(), r.bytes);
  return r;
}

std::string streamSummary(const std::string &dir, const std::string &format, const StreamPlan &plan,
                          const StreamResult &r, const std::string &destination, const std::string &against) {
  size_t cast = 0;
  for (const auto &t : plan.tensors) cast += t.castToBf16 ? 1 : 0;
  std::string finite = r.nonFinite.empty()
                           ? "every value finite"
                           : fmt::format("{} tensor(s) holding NaN / Inf (first: {}; recorded in the ledger)",
                                         r.nonFinite.size(), r.nonFinite.begin()->first);
  std::string line = fmt::format(
      "checkpoint {} ({}): {} tensors, {:.2f} GiB {} in {:.2f} s ({:.2f} GB/s); checked while loading: the sha256 of "
      "every stored tensor -> content_sha256 {}{}, {}; before loading: names, dtypes and shapes as the config implies",
      dir, format, plan.tensors.size(), double(r.bytes) / 1073741824.0, destination, r.seconds,
      r.seconds > 0 ? double(r.bytes) / 1e9 / r.seconds : 0.0, r.contentSha256,
      against.empty() ? std::string() : " (equal to " + against + ")", finite);
  if (cast)
    line += fmt::format("; {} tensor(s) stored as F32 rounded to BF16 (nearest even) while loading, before the NaN / "
                        "Inf check ({:.2f} GiB placed)", cast, double(r.copied) / 1073741824.0);
  return line;
}

} // namespace h3c::rt
