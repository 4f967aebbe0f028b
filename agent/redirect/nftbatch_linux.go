package redirect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftBatch is one nf_tables transaction, marshalled for a NETLINK_NETFILTER
// socket: the kernel applies the messages between the batch's begin and
// end all or nothing.
//
// It is written here rather than through the nftables library's Conn,
// which asks for an acknowledgement of every message and an echo of every
// rule: inside the runtime's hook those replies cost more than the rules
// (each echo is a notification the kernel builds, each ack a read). Only
// the last message asks for an ack; any failing message is reported
// anyway. The kernel processes a batch inside the sendmsg that carries it,
// so every reply is queued by the time the send returns.
type nftBatch struct {
	family byte
	msgs   [][]byte // each a whole netlink message, sequence unset
	what   []string // what msgs[i] does, for errors
	err    error    // the first marshalling error
}

// The nf_tables message header flags: a new object (create), one that
// must not exist yet (exclusive), a rule appended to its chain.
const (
	nlmCreate      = unix.NLM_F_REQUEST | unix.NLM_F_CREATE
	nlmCreateExcl  = nlmCreate | unix.NLM_F_EXCL
	nlmAppend      = nlmCreate | unix.NLM_F_APPEND
	nlmRequestOnly = unix.NLM_F_REQUEST
)

func newNftBatch(family byte) *nftBatch { return &nftBatch{family: family} }

// add marshals one message of type typ (NFT_MSG_*) with attributes attrs.
func (b *nftBatch) add(typ uint16, flags uint16, what string, attrs func(ae *netlink.AttributeEncoder)) {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	attrs(ae)
	data, err := ae.Encode()
	if err != nil {
		if b.err == nil {
			b.err = fmt.Errorf("marshal %s: %w", what, err)
		}
		return
	}
	b.msgs = append(b.msgs, nfMessage(unix.NFNL_SUBSYS_NFTABLES<<8|typ, flags, b.family, 0, data))
	b.what = append(b.what, what)
}

// addTable adds table name; exclusive fails the batch with EEXIST if it
// exists already.
func (b *nftBatch) addTable(name string, exclusive bool) {
	flags := uint16(nlmCreate)
	if exclusive {
		flags = nlmCreateExcl
	}
	b.add(unix.NFT_MSG_NEWTABLE, flags, "table "+name, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_TABLE_NAME, name)
		ae.Uint32(unix.NFTA_TABLE_FLAGS, 0)
	})
}

// delTable deletes table name (ENOENT if it does not exist).
func (b *nftBatch) delTable(name string) {
	b.add(unix.NFT_MSG_DELTABLE, nlmRequestOnly, "delete table "+name, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_TABLE_NAME, name)
	})
}

// addChain adds base chain c to table.
func (b *nftBatch) addChain(table string, c chainSpec) {
	b.add(unix.NFT_MSG_NEWCHAIN, nlmCreate, "chain "+c.name, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_CHAIN_TABLE, table)
		ae.String(unix.NFTA_CHAIN_NAME, c.name)
		ae.Nested(unix.NFTA_CHAIN_HOOK, func(ne *netlink.AttributeEncoder) error {
			ne.Uint32(unix.NFTA_HOOK_HOOKNUM, uint32(*c.hook))
			ne.Uint32(unix.NFTA_HOOK_PRIORITY, uint32(*c.priority))
			return nil
		})
		ae.String(unix.NFTA_CHAIN_TYPE, string(c.typ))
	})
}

// addRule appends a rule of exprs to chain in table; n numbers it in its
// chain, for errors.
func (b *nftBatch) addRule(table, chain string, n int, exprs []expr.Any) {
	what := fmt.Sprintf("rule %d of chain %s", n, chain)
	b.add(unix.NFT_MSG_NEWRULE, nlmAppend, what, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_RULE_TABLE, table)
		ae.String(unix.NFTA_RULE_CHAIN, chain)
		ae.Nested(unix.NFTA_RULE_EXPRESSIONS, func(ne *netlink.AttributeEncoder) error {
			for _, e := range exprs {
				data, err := expr.Marshal(b.family, e)
				if err != nil {
					return fmt.Errorf("%T: %w", e, err)
				}
				ne.Bytes(unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, data)
			}
			return nil
		})
	})
}

// nfMessage is one netfilter netlink message: header, nfgenmsg, data.
func nfMessage(typ, flags uint16, family byte, resID uint16, data []byte) []byte {
	const hdr = unix.NLMSG_HDRLEN + 4 // struct nfgenmsg
	msg := make([]byte, hdr, hdr+len(data)+3)
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags)
	msg[unix.NLMSG_HDRLEN] = family
	msg[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(msg[unix.NLMSG_HDRLEN+2:], resID)
	msg = append(msg, data...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	for len(msg)%unix.NLMSG_ALIGNTO != 0 {
		msg = append(msg, 0)
	}
	return msg
}

// nftWire is a batch ready to send: begin, the messages numbered from 1
// (the last asks for an ack), end.
type nftWire struct {
	buf  []byte
	what []string // what message seq i+1 does
}

// wire marshals b for sending; it is read-only afterwards and may be sent
// any number of times, concurrently.
func (b *nftBatch) wire() (*nftWire, error) {
	if b.err != nil {
		return nil, b.err
	}
	if len(b.msgs) == 0 {
		return nil, errors.New("empty nftables batch")
	}
	w := &nftWire{what: b.what}
	w.buf = append(w.buf, nfMessage(unix.NFNL_MSG_BATCH_BEGIN, nlmRequestOnly, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES, nil)...)
	for i, m := range b.msgs {
		at := len(w.buf)
		w.buf = append(w.buf, m...)
		binary.NativeEndian.PutUint32(w.buf[at+8:], uint32(i+1)) // nlmsg_seq
		if i == len(b.msgs)-1 {
			flags := binary.NativeEndian.Uint16(w.buf[at+6:])
			binary.NativeEndian.PutUint16(w.buf[at+6:], flags|unix.NLM_F_ACK)
		}
	}
	w.buf = append(w.buf, nfMessage(unix.NFNL_MSG_BATCH_END, nlmRequestOnly, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES, nil)...)
	return w, nil
}

// send commits the batch through sock, a NETLINK_NETFILTER socket (in the
// namespace to change). The error of a refused batch wraps the kernel's
// errno (errors.Is(err, unix.EEXIST)) and names the message it refused.
func (w *nftWire) send(sock int) error {
	buf := make([]byte, 8192)
	// Whatever an earlier batch on this socket left unread is not this
	// one's answer (its sequence numbers are the same).
	for {
		if _, _, err := unix.Recvfrom(sock, buf, unix.MSG_DONTWAIT); err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err := unix.Sendto(sock, w.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send batch: %w", err)
	}
	// The ack asked of the last message is sent once the batch is
	// processed, committed or aborted; an abort also answers each
	// refused message with its error. The end message wire appends is
	// what makes the kernel commit.
	last := uint32(len(w.what))
	var errs []error
	acked := false
	for {
		n, _, err := unix.Recvfrom(sock, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			break // every reply is read
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("receive the batch's answer: %w", err))...)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("parse the batch's answer: %w", err))...)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			code := int32(binary.NativeEndian.Uint32(m.Data))
			seq := m.Header.Seq
			if seq == last {
				acked = true
			}
			if code == 0 {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", w.describe(seq), unix.Errno(-code)))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !acked {
		return errors.New("the kernel did not answer the batch")
	}
	return nil
}

// describe names the message with sequence number seq.
func (w *nftWire) describe(seq uint32) string {
	if seq >= 1 && int(seq) <= len(w.what) {
		return w.what[seq-1]
	}
	return "commit"
}

// nftSocket opens a NETLINK_NETFILTER socket in the calling thread's
// network namespace (netns.RunIn's, for a pod's).
func nftSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	// A refused message is answered with its header only, not echoed
	// whole.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	return fd, nil
}
