// accountant
