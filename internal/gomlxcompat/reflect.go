package gomlxcompat

import (
	"fmt"
	"reflect"
	"unsafe"
)

// unexportedField returns a readable and writable view of the unexported field name of the
// struct value v.
func unexportedField(v reflect.Value, name string) (reflect.Value, error) {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, fmt.Errorf("%s is not a struct (GoMLX version changed?)", v.Type())
	}
	f := v.FieldByName(name)
	if !f.IsValid() {
		return reflect.Value{}, fmt.Errorf("%s has no field %q (GoMLX version changed?)", v.Type(), name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}
