"""docs/spec/layout-and-dtype.md §8 Dtype descriptors: the built-in table, identity,
immutability, subtyping, compound members, from_name, storage_schema and storage_zero."""
import copy
import pickle

import pytest

from strideweave.carriers.dtype import (BlockScaledDType, CompoundDType, DType, DTypeCategory, SimpleDType,
                                        storage_schema, storage_zero)

D = DType

TABLE = [
    # name, class, bits, supertype, schema, zero
    ("Any", DTypeCategory, None, None, ("Any",), None),
    ("Floating", DTypeCategory, None, "Any", ("Floating",), None),
    ("Integer", DTypeCategory, None, "Any", None, None),
    ("Float32", SimpleDType, 32, "Floating", ("Float32",), 0.0),
    ("Float64", SimpleDType, 64, "Floating", ("Float64",), None),
    ("Int32", SimpleDType, 32, "Integer", ("Int32",), 0),
    ("Bool", SimpleDType, 8, "Any", ("Bool",), False),
    ("E2M1", SimpleDType, 4, "Floating", ("E2M1",), None),
    ("E8M0", SimpleDType, 8, "Floating", ("E8M0",), None),
    ("MXFP4", BlockScaledDType, None, "Any", ("E2M1", "E8M0"), None),
]


@pytest.mark.parametrize("name,cls,bits,sup,schema,zero", TABLE)
def test_builtin_table(name, cls, bits, sup, schema, zero):
    d = getattr(D, name)
    assert type(d) is cls
    assert d.name == name and d.value == name
    assert DType.from_name(name) is d
    assert repr(d) == f"{cls.__name__}('{name}')"
    assert d.supertype is (None if sup is None else getattr(D, sup))
    if bits is None:
        with pytest.raises(AttributeError):
            d.bits
    else:
        assert d.bits == bits
    if schema is None:
        with pytest.raises(ValueError):
            storage_schema(d)
    else:
        assert storage_schema(d) == tuple(getattr(D, s) for s in schema)
    assert storage_zero(d) == zero and type(storage_zero(d)) is type(zero)
    assert d.representation_rules == ()
    assert d.is_opaque_storage() == (name in ("Any", "Floating"))
    assert d.is_category() == (cls is DTypeCategory)
    assert d.is_simple() == (cls is SimpleDType)
    assert d.is_compound() == issubclass(cls, CompoundDType)


def test_identity_semantics():
    f = D.Float32
    assert f != "Float32"
    assert hash(f) == hash(D.Float32)
    assert copy.copy(f) is f and copy.deepcopy(f) is f
    assert pickle.loads(pickle.dumps(f)) is f
    assert pickle.loads(pickle.dumps(D.MXFP4)) is D.MXFP4


def test_immutability():
    with pytest.raises(AttributeError):
        D.Float32.foo = 1
    with pytest.raises(AttributeError):
        del D.Float32.name
    with pytest.raises(AttributeError):
        D.Float32 = D.Int32
    with pytest.raises(AttributeError):
        D.X = D.Int32
    with pytest.raises(AttributeError):
        del D.Float32
    assert D.Float32.name == "Float32"
    with pytest.raises(TypeError):
        DType("Float32")
    with pytest.raises(TypeError):
        SimpleDType()


def test_supertypes_and_subtyping():
    assert D.Float32.supertypes() == (D.Floating, D.Any)
    assert D.Any.supertypes() == ()
    assert D.Float32.is_subtype_of(D.Floating) and D.Floating.is_subtype_of(D.Any)
    assert D.Float32.is_subtype_of(D.Float32)
    assert not D.Int32.is_subtype_of(D.Floating)
    with pytest.raises(TypeError):
        D.Float32.is_subtype_of("Floating")


def test_compound_members():
    m = D.MXFP4
    assert m.simple_types == (D.E2M1, D.E8M0) and m.num_carriers == 2 and m.element is D.E2M1
    with pytest.raises(AttributeError):
        D.Float32.simple_types


def test_from_name_errors():
    with pytest.raises(TypeError):
        DType.from_name(3)
    with pytest.raises(LookupError):
        DType.from_name("Float16")
    with pytest.raises(LookupError):
        SimpleDType.from_name("Floating")
    assert SimpleDType.from_name("Float32") is D.Float32


def test_planar_pair_is_registered_but_not_an_attribute():
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR
    assert DType.from_name("PlanarFloat32Pair") is PLANAR_FLOAT32_PAIR
    assert not hasattr(DType, "PlanarFloat32Pair")
    assert storage_schema(PLANAR_FLOAT32_PAIR) == (D.Float32, D.Float32)


def test_schema_and_zero_reject_non_dtypes():
    with pytest.raises(TypeError):
        storage_schema("Float32")
    with pytest.raises(TypeError):
        storage_zero(None)
