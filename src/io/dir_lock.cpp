#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace attnlab::io {

DirLock::DirLock(const std::string& dir, const std::string& name, const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ATTN_REQUIRE(fd_ >= 0, "%s '%s': cannot open its lock file '%s': %s", what.c_str(), dir.c_str(),
               path.c_str(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    ATTN_REQUIRE(err != EWOULDBLOCK,
                 "%s '%s' is in use by another attnlab process (pid %s, lock file '%s'): two "
                 "runs writing one directory would interleave their metrics and checkpoints; "
                 "wait for it, or choose another %s",
                 what.c_str(), dir.c_str(), n > 0 ? holder : "unknown", path.c_str(), what.c_str());
    // A filesystem without flock (some Lustre, NFS without a lock daemon, FUSE): run unlocked.
    std::fprintf(stderr, "warning: %s '%s': cannot lock '%s' (%s); running without the lock\n",
                 what.c_str(), dir.c_str(), path.c_str(), std::strerror(err));
    return;
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace attnlab::io
