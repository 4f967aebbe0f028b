package redirect

import (
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// match is one nftables rule under construction: a list of expressions
// read left to right like `nft` syntax. Every helper loads into register 1
// and compares; the rule ends with a verdict or statement.
type match []expr.Any

func rule() match { return nil }

func (m match) cmp(op expr.CmpOp, data []byte) match {
	return append(m, &expr.Cmp{Op: op, Register: 1, Data: data})
}

// family: meta nfproto ipv4|ipv6 (guards address matches in an inet table).
func (m match) family(f Family) match {
	proto := byte(unix.NFPROTO_IPV4)
	if f == IPv6 {
		proto = unix.NFPROTO_IPV6
	}
	return append(m, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}).cmp(expr.CmpOpEq, []byte{proto})
}

// l4: meta l4proto tcp|udp.
func (m match) l4(proto byte) match {
	return append(m, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}).cmp(expr.CmpOpEq, []byte{proto})
}

func (m match) tcp() match { return m.l4(unix.IPPROTO_TCP) }
func (m match) udp() match { return m.l4(unix.IPPROTO_UDP) }

// addr: ip/ip6 saddr|daddr ==|!= a. The family must be matched first.
func (m match) addr(dst bool, op expr.CmpOp, a netip.Addr) match {
	var off, n uint32 = 12, 4 // IPv4 saddr
	if a.Is6() {
		off, n = 8, 16 // IPv6 saddr
	}
	if dst {
		off += n
	}
	return append(m, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}).
		cmp(op, a.AsSlice())
}

func (m match) saddrNot(a netip.Addr) match { return m.addr(false, expr.CmpOpNeq, a) }
func (m match) daddrNot(a netip.Addr) match { return m.addr(true, expr.CmpOpNeq, a) }

// daddrNotEither: ip/ip6 daddr != a ip/ip6 daddr != b, the address loaded
// once and compared twice (nft prints it as the two matches): the kernel
// looks every expression of a rule up by name, a cost inside the
// runtime's hook.
func (m match) daddrNotEither(a, b netip.Addr) match {
	return m.daddrNot(a).cmp(expr.CmpOpNeq, b.AsSlice())
}
func (m match) port(dst bool, op expr.CmpOp, p uint16) match {
	var off uint32 // source port
	if dst {
		off = 2
	}
	return append(m, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2}).
		cmp(op, binaryutil.BigEndian.PutUint16(p))
}

func (m match) dport(p uint16) match    { return m.port(true, expr.CmpOpEq, p) }
func (m match) dportNot(p uint16) match { return m.port(true, expr.CmpOpNeq, p) }
func (m match) sport(p uint16) match    { return m.port(false, expr.CmpOpEq, p) }

// oifname: meta oifname ==|!= name.
func (m match) oifname(op expr.CmpOp, name string) match {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return append(m, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}).cmp(op, b)
}

// masked loads key (meta mark or ct mark), masks it with MarkMask and
// compares it with v.
func (m match) masked(load expr.Any, op expr.CmpOp, v uint32) match {
	return append(m, load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(MarkMask), Xor: binaryutil.NativeEndian.PutUint32(0)}).
		cmp(op, binaryutil.NativeEndian.PutUint32(v))
}

func metaMark() expr.Any { return &expr.Meta{Key: expr.MetaKeyMARK, Register: 1} }
func ctMark() expr.Any   { return &expr.Ct{Key: expr.CtKeyMARK, Register: 1} }

func (m match) mark(v uint32) match    { return m.masked(metaMark(), expr.CmpOpEq, v) }
func (m match) markNot(v uint32) match { return m.masked(metaMark(), expr.CmpOpNeq, v) }

// markNotEither: meta mark & MarkMask != a meta mark & MarkMask != b, the
// masked mark computed once (as daddrNotEither).
func (m match) markNotEither(a, b uint32) match {
	return m.markNot(a).cmp(expr.CmpOpNeq, binaryutil.NativeEndian.PutUint32(b))
}
func (m match) ctMarkIs(v uint32) match { return m.masked(ctMark(), expr.CmpOpEq, v) }

// accept ends the rule: accept.
func (m match) accept() []expr.Any {
	return append(m, &expr.Verdict{Kind: expr.VerdictAccept})
}

// redirect ends the rule: redirect to :port.
func (m match) redirect(port uint16) []expr.Any {
	return append(m,
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED})
}

// setConnMark ends the rule like CONNMARK --set-xmark v/MarkMask:
// ct mark set ct mark & ^MarkMask ^ v.
func (m match) setConnMark(v uint32) []expr.Any {
	return append(m, ctMark(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^MarkMask), Xor: binaryutil.NativeEndian.PutUint32(v)},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true})
}

// restoreMark ends the rule like CONNMARK --restore-mark with full masks:
// meta mark set ct mark.
func (m match) restoreMark() []expr.Any {
	return append(m, ctMark(), &expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true})
}

// ctZone ends the rule: ct zone set zone.
func (m match) ctZone(zone uint16) []expr.Any {
	return append(m,
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint16(zone)},
		&expr.Ct{Key: expr.CtKeyZONE, Register: 1, SourceRegister: true})
}
