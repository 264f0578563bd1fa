//! Socket objects, one kind per file: `unix` (AF_UNIX stream, datagram and
//! seqpacket, all in the kernel's memory). They implement the socket interface
//! (`crate::file::socket`) that the socket system calls (`syscall::net`) use.
//! Internet sockets come on a TCP/IP stack (issue 14, not yet here): until then
//! AF_INET and AF_INET6 are EAFNOSUPPORT.

pub mod unix;
