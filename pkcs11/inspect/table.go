package inspect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// WriteTokenTable prints tokens as an aligned table, one a line.
func WriteTokenTable(w io.Writer, tokens []tokeninfo.TokenInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tLABEL\tSERIAL\tMANUFACTURER\tMODEL\tFLAGS")
	for _, t := range tokens {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.Slot, t.Label, t.Serial, t.Manufacturer, t.Model, strings.Join(t.Flags, ","))
	}
	return tw.Flush()
}

// WriteObjectTable prints objects as an aligned table, one a line.
func WriteObjectTable(w io.Writer, objs []Object) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tLABEL\tID\tTYPE\tSIZE\tKEPT\tSUBJECT\tISSUER\tNOT AFTER\tTHUMBPRINT")
	for _, o := range objs {
		size := ""
		if o.Bits > 0 {
			size = fmt.Sprint(o.Bits)
		}
		if o.Curve != "" {
			size = o.Curve
			if o.KeyType == "GOST" {
				size = fmt.Sprintf("%d/%s", o.Bits, o.Curve) // the parameter set does not say the size
			}
		}
		notAfter := ""
		if !o.NotAfter.IsZero() {
			notAfter = o.NotAfter.Format("2006-01-02")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Class, o.Label, o.ID, o.KeyType, size, o.Kept(), o.Subject, o.Issuer, notAfter, o.Thumbprint)
	}
	return tw.Flush()
}

// Kept says how a private key is held: "on-token" when it is sensitive and
// not extractable, "EXTRACTABLE" when the token would let it out.
func (o Object) Kept() string {
	switch {
	case o.Extractable != nil && *o.Extractable:
		return "EXTRACTABLE"
	case o.Sensitive != nil && *o.Sensitive:
		return "on-token"
	}
	return ""
}
