package inspect

import (
	"context"
	"fmt"
	"strings"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// LibraryInfo is the module's C_GetInfo.
type LibraryInfo struct {
	Path            string `json:"path"`
	Manufacturer    string `json:"manufacturer"`
	Description     string `json:"description"`
	CryptokiVersion string `json:"cryptokiVersion"`
	LibraryVersion  string `json:"libraryVersion"`
}

// SlotReport is one slot (C_GetSlotInfo) and its token, when one is present.
type SlotReport struct {
	ID           uint                 `json:"id"`
	Description  string               `json:"description"`
	Manufacturer string               `json:"manufacturer"`
	TokenPresent bool                 `json:"tokenPresent"`
	Removable    bool                 `json:"removable"`
	Hardware     bool                 `json:"hardware"`
	Token        *tokeninfo.TokenInfo `json:"token,omitempty"`
}

// ModuleReport is what a module says about itself and its slots.
type ModuleReport struct {
	Library LibraryInfo  `json:"library"`
	Slots   []SlotReport `json:"slots"`
}

// InspectModule loads the module at path (once per process) and reads its
// library information and every slot, with or without a token, within ctx.
func InspectModule(ctx context.Context, path string) (*ModuleReport, error) {
	var r *ModuleReport
	err := pkcs11.WithModule(ctx, path, func(b pkcs11.Backend) error {
		info, err := b.GetInfo()
		if err != nil {
			return tokenerr.Classify("read the module's information (C_GetInfo)", err)
		}
		r = &ModuleReport{Library: LibraryInfo{Path: path, Manufacturer: trimPad(info.ManufacturerID), Description: trimPad(info.LibraryDescription),
			CryptokiVersion: version(info.CryptokiVersion), LibraryVersion: version(info.LibraryVersion)}}
		slots, err := b.GetSlotList(false)
		if err != nil {
			return tokenerr.Classify("list the module's slots", err)
		}
		tokens, err := tokeninfo.ReadTokens(b)
		if err != nil {
			return err
		}
		for _, s := range slots {
			si, err := b.GetSlotInfo(s)
			if err != nil {
				return tokenerr.Classify(fmt.Sprintf("read slot %d", s), err)
			}
			sr := SlotReport{ID: s, Description: trimPad(si.SlotDescription), Manufacturer: trimPad(si.ManufacturerID),
				TokenPresent: si.Flags&p11.CKF_TOKEN_PRESENT != 0, Removable: si.Flags&p11.CKF_REMOVABLE_DEVICE != 0, Hardware: si.Flags&p11.CKF_HW_SLOT != 0}
			for i := range tokens {
				if tokens[i].Slot == s {
					sr.Token = &tokens[i]
				}
			}
			r.Slots = append(r.Slots, sr)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func trimPad(s string) string { return strings.TrimRight(s, " \x00") }

func version(v p11.Version) string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }
