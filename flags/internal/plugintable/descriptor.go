package main

import (
	"errors"
	"regexp"
	"strings"
)

// The value derivation (values.go) needs the names of the proto enum behind each flag. A
// plugin embeds its XLA's xla.proto as a serialized FileDescriptorProto (protobuf's generated
// code registers it), so the names come from the plugin itself, including enums newer than any
// xla.proto onegpu has. This file reads those descriptors with a minimal protobuf wire parser:
// only the fields it needs, without a protobuf dependency.

// descriptorStart finds the start of an embedded FileDescriptorProto of XLA: field 1 (name,
// length-delimited) holding "xla/....proto", followed by field 2 (package).
var descriptorStart = regexp.MustCompile(`\x0a[\x05-\x7f]xla/[a-z0-9_/]+\.proto\x12`)

// flagEnums returns, for each field of xla.DebugOptions whose values are a proto enum, the
// names of that enum's values in declaration order: for an enum field (repeated or not) its
// enum; for a message field, the enum of its first field whose enum belongs to DebugOptions
// (xla_enable_nccl_symmetric_buffers_for_collectives: CollectiveFilter.collective).
func flagEnums(plugin []byte) map[string][]string {
	enums := map[string][]string{}    // full name (".xla.DebugOptions.DetectionMode") -> values
	messages := map[string][]fieldD{} // full name -> fields
	for _, loc := range descriptorStart.FindAllIndex(plugin, -1) {
		readFile(plugin[loc[0]:], enums, messages)
	}
	out := map[string][]string{}
	for _, f := range messages[".xla.DebugOptions"] {
		switch f.typ {
		case typeEnum:
			if values := enums[f.typeName]; len(values) > 0 {
				out[f.name] = values
			}
		case typeMessage:
			for _, inner := range messages[f.typeName] {
				if inner.typ == typeEnum && strings.HasPrefix(inner.typeName, ".xla.DebugOptions.") && len(enums[inner.typeName]) > 0 {
					out[f.name] = enums[inner.typeName]
					break
				}
			}
		}
	}
	return out
}

// fieldD is what flagEnums needs of a FieldDescriptorProto.
type fieldD struct {
	name, typeName string
	typ            uint64
}

// FieldDescriptorProto.Type values.
const (
	typeMessage = 11
	typeEnum    = 14
)

// readFile reads the FileDescriptorProto at the start of b, which goes on with unrelated bytes:
// it stops at the first field that is not one of a FileDescriptorProto or does not parse.
func readFile(b []byte, enums map[string][]string, messages map[string][]fieldD) {
	pkg := ""
	for len(b) > 0 {
		num, typ, value, rest, err := nextField(b)
		if err != nil || num < 1 || num > 14 {
			return
		}
		b = rest
		switch {
		case num == 2 && typ == wireBytes:
			pkg = string(value)
		case num == 4 && typ == wireBytes:
			if readMessage(value, "."+pkg, enums, messages) != nil {
				return
			}
		case num == 5 && typ == wireBytes:
			if readEnum(value, "."+pkg, enums) != nil {
				return
			}
		}
	}
}

// readMessage reads a DescriptorProto: its fields, nested messages and enums.
func readMessage(b []byte, scope string, enums map[string][]string, messages map[string][]fieldD) error {
	var name string
	var fields []fieldD
	var nested, nestedEnums [][]byte
	err := eachField(b, func(num int, typ int, value []byte, _ uint64) error {
		if typ != wireBytes {
			return nil
		}
		switch num {
		case 1:
			name = string(value)
		case 2:
			f, err := readField(value)
			if err != nil {
				return err
			}
			fields = append(fields, f)
		case 3:
			nested = append(nested, value)
		case 4:
			nestedEnums = append(nestedEnums, value)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if name == "" {
		return errWire // a message without a name
	}
	full := scope + "." + name
	messages[full] = fields
	for _, m := range nested {
		if err := readMessage(m, full, enums, messages); err != nil {
			return err
		}
	}
	for _, e := range nestedEnums {
		if err := readEnum(e, full, enums); err != nil {
			return err
		}
	}
	return nil
}

// readField reads a FieldDescriptorProto: name (1), type (5) and type_name (6).
func readField(b []byte) (fieldD, error) {
	var f fieldD
	err := eachField(b, func(num int, typ int, value []byte, n uint64) error {
		switch {
		case num == 1 && typ == wireBytes:
			f.name = string(value)
		case num == 5 && typ == wireVarint:
			f.typ = n
		case num == 6 && typ == wireBytes:
			f.typeName = string(value)
		}
		return nil
	})
	return f, err
}

// readEnum reads an EnumDescriptorProto: its name (1) and its values' names (2.1).
func readEnum(b []byte, scope string, enums map[string][]string) error {
	var name string
	var values []string
	err := eachField(b, func(num int, typ int, value []byte, _ uint64) error {
		switch {
		case num == 1 && typ == wireBytes:
			name = string(value)
		case num == 2 && typ == wireBytes:
			return eachField(value, func(num int, typ int, value []byte, _ uint64) error {
				if num == 1 && typ == wireBytes {
					values = append(values, string(value))
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if name == "" {
		return errWire // an enum without a name
	}
	enums[scope+"."+name] = values
	return nil
}

// Wire types.
const (
	wireVarint = 0
	wireI64    = 1
	wireBytes  = 2
	wireI32    = 5
)

var errWire = errors.New("not protobuf wire format")

// eachField calls f for each field of the message b, which must parse to its end.
func eachField(b []byte, f func(num, typ int, value []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, value, rest, err := nextField(b)
		if err != nil {
			return err
		}
		var n uint64
		if typ == wireVarint {
			n, _, _ = varint(value)
		}
		if err := f(num, typ, value, n); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// nextField splits the first field off b: its number, wire type, and value (the payload of a
// length-delimited field, else the raw bytes of the number).
func nextField(b []byte) (num, typ int, value, rest []byte, err error) {
	key, n, err := varint(b)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	num, typ, b = int(key>>3), int(key&7), b[n:]
	switch typ {
	case wireVarint:
		_, n, err = varint(b)
	case wireI64:
		n = 8
	case wireI32:
		n = 4
	case wireBytes:
		var length uint64
		length, n, err = varint(b)
		if err == nil && length > uint64(len(b)-n) {
			err = errWire
		}
		if err == nil {
			return num, typ, b[n : n+int(length)], b[n+int(length):], nil
		}
	default:
		err = errWire
	}
	if err != nil || n > len(b) || num == 0 {
		return 0, 0, nil, nil, errWire
	}
	return num, typ, b[:n], b[n:], nil
}

// varint reads a base-128 varint and returns it with its length.
func varint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errWire
}
