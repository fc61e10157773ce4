// Package regularfile opens and reads files that must be regular files: it never follows a
// symbolic link at the path's last element, never blocks on a named pipe or a device, and reads
// no more than the caller expects. A checkpoint folder is the user's data and may hold anything
// (a link to /dev/zero, a FIFO, a link to another file): reading or truncating through such an
// entry would exhaust memory, hang, or destroy a file elsewhere.
//
//	f, err := regularfile.Open(path, os.O_RDWR|os.O_CREATE, 0o666) // a link or a FIFO is an error
//	b, err := regularfile.ReadExactly(path, 1024)                    // an error unless 1024 bytes
//
// On unix the open uses O_NOFOLLOW and O_NONBLOCK; elsewhere (Windows) the path is checked with
// Lstat before the open and the opened file compared with it (os.SameFile), so that a link
// swapped in between is refused too.
package regularfile
