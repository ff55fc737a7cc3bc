// An exclusive lock on a directory for the life of the object: `<dir>/<name>` opened and locked
// with flock(LOCK_EX | LOCK_NB), this process's pid written into it. A second holder (another
// process, or another open of the file in this one) is refused at once, naming the directory and
// the pid the file holds. The lock goes with the process (a crash releases it); the file stays.
#pragma once
#include <string>

namespace attnlab::io {

class DirLock {
 public:
  // `what` names the directory's role in the error ("train.out_dir").
  DirLock(const std::string& dir, const std::string& name, const std::string& what);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace attnlab::io
