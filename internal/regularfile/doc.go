// Package regularfile opens and reads files that must be regular files: it never follows a
// symbolic link at the path's last element, never blocks on a named pipe or a device, and reads
// no more than the caller expects. A checkpoint folder is the user's data and may hold anything
// (a link to /dev/zero, a FIFO, a link to another file): reading or truncating through such an
// entry would exhaust memory, hang, or destroy a file elsewhere.
//
//	f, err := regularfile.Open(path, os.O_RDWR|os.O_CREATE, 0o666) // a link or a FIFO is an error
//	b, err := regularfile.ReadExactly(path, 1024)                    // an error unless 1024 bytes
//
// Files a user or a download provides (a Hugging Face folder, token ids, a flags file) may be
// links, as a Hugging Face cache's snapshots are: OpenLinked, CheckLinked and ReadLinked follow
// links but still read only a regular file at their end, never waiting on a named pipe, and
// ReadLinked reads a whole file only up to a bound (MaxSmallBytes for configs, indexes and
// tokenizer files), so that a sparse or endless file is refused before it is read.
//
// On unix the open uses O_NOFOLLOW and O_NONBLOCK; elsewhere (Windows) the path is checked with
// Lstat before the open and the opened file compared with it (os.SameFile), so that a link
// swapped in between is refused too.
package regularfile
