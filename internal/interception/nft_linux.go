package interception

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Install writes r into the network namespace of the calling process,
// replacing an earlier rule set of the same table (see the package doc). It
// needs CAP_NET_ADMIN there, and a kernel with nf_tables NAT
// (CONFIG_NFT_NAT, CONFIG_NFT_REDIR); the error says which is missing.
func Install(r Rules) error {
	if err := r.Validate(); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return explain(err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	// Add then delete: deleting a table that does not exist fails the whole
	// transaction, adding one that exists does nothing. The result is the same
	// table, new, whatever was there before.
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	policy := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{
		Name: ChainName, Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &policy,
	})
	for _, exprs := range ruleExprs(r) {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		return explain(err)
	}
	return nil
}

// ruleExprs are the rules of the chain, in order (package doc).
func ruleExprs(r Rules) [][]expr.Any {
	rules := [][]expr.Any{{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(r.ExcludeUID)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}}
	for _, p := range r.Ports {
		rules = append(rules, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(r.To)},
			&expr.Redir{RegisterProtoMin: 1},
		})
	}
	return rules
}

// ErrPermission and ErrUnsupported classify Install's failures.
var (
	ErrPermission  = errors.New("not permitted: the container needs the NET_ADMIN capability (and to run as root) in the pod's network namespace")
	ErrUnsupported = errors.New("the kernel has no nf_tables NAT support (CONFIG_NF_TABLES, CONFIG_NFT_NAT, CONFIG_NFT_REDIR)")
)

func explain(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("installing the nat OUTPUT rules: %w (%w)", ErrPermission, err)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOENT), errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.EAFNOSUPPORT):
		return fmt.Errorf("installing the nat OUTPUT rules: %w (%w)", ErrUnsupported, err)
	}
	return fmt.Errorf("installing the nat OUTPUT rules: %w", err)
}
